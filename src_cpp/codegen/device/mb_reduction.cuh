// The loops of a generated reduction kernel. The emitter supplies a Load
// functor (the pointwise prologue: element at a linear index of the input
// iteration space -> value) and a Store functor (finalize, epilogue and
// store of one output element); everything else is here.
//
// Every loop is grid-stride over output rows or columns, so any grid size
// is correct; the runtime sizes the grid for occupancy.
#pragma once

#include "mb_reduce.cuh"
#include "mb_vector_io.cuh"

namespace mb {

// Inner reduction, one block per row: input viewed as [rows, n], reduced
// over the contiguous n. VEC > 1 reads VEC elements at once when n allows
// (rows then start 16-byte aligned because the base is).
template <class R, class I, int VEC, class Load, class Store>
__device__ __forceinline__ void reduce_inner_block(const Load& load, const Store& store, I rows,
                                                   I n) {
  typedef typename R::AccT Acc;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I base = row * n;
    Acc acc = R::identity();
    bool done = false;
    if constexpr (VEC > 1) {
      if (n % VEC == 0) {
        for (I r = threadIdx.x * VEC; r < n; r += blockDim.x * VEC) {
          typename Load::Value v[VEC];
          load.template vec<VEC>(base + r, v);
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc = R::combine(acc, R::make(v[k], r + k));
        }
        done = true;
      }
    }
    if (!done) {
      for (I r = threadIdx.x; r < n; r += blockDim.x)
        acc = R::combine(acc, R::make(load(base + r), r));
    }
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) store(row, acc, n);
  }
}

// Inner reduction, one warp per row: for short rows, where a whole block
// per row would leave most threads idle.
template <class R, class I, class Load, class Store>
__device__ __forceinline__ void reduce_inner_warp(const Load& load, const Store& store, I rows,
                                                  I n) {
  typedef typename R::AccT Acc;
  const I warps_per_block = blockDim.x / 32;
  const I lane = threadIdx.x % 32;
  const I first = static_cast<I>(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  for (I row = first; row < rows; row += static_cast<I>(gridDim.x) * warps_per_block) {
    const I base = row * n;
    Acc acc = R::identity();
    for (I r = lane; r < n; r += 32) acc = R::combine(acc, R::make(load(base + r), r));
    acc = warp_reduce<R>(acc);
    if (lane == 0) store(row, acc, n);
  }
}

// Outer reduction: input viewed as [outer, n, inner], reduced over n.
// Block (32, 8): x walks 32 adjacent columns (coalesced), y splits n; the 8
// partial results meet in shared memory.
template <class R, class I, class Load, class Store>
__device__ __forceinline__ void reduce_outer(const Load& load, const Store& store, I outer, I n,
                                             I inner) {
  typedef typename R::AccT Acc;
  __shared__ Acc tile[8][33];  // 33: no bank conflicts on the column walk
  const I col_blocks = (inner + 31) / 32;
  for (I b = blockIdx.x; b < outer * col_blocks; b += gridDim.x) {
    const I o = b / col_blocks;
    const I col = (b % col_blocks) * 32 + threadIdx.x;
    Acc acc = R::identity();
    if (col < inner) {
      for (I r = threadIdx.y; r < n; r += blockDim.y) {
        acc = R::combine(acc, R::make(load((o * n + r) * inner + col), r));
      }
    }
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
      for (int y = 1; y < static_cast<int>(blockDim.y); ++y)
        acc = R::combine(acc, tile[y][threadIdx.x]);
      store(o * inner + col, acc, n);
    }
    __syncthreads();
  }
}

}  // namespace mb
