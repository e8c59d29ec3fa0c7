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

// One thread's accumulator over elements [first, last) of the row that
// starts at linear index `base` (n elements long); r passed to R::make is
// the index within the row, which argmax/argmin return. VEC > 1 reads VEC
// elements at once when the row and both ends are whole vectors (rows then
// start 16-byte aligned because the base is).
template <class R, class I, int VEC, class Load>
__device__ __forceinline__ typename R::AccT inner_row_range(const Load& load, I base, I n, I first,
                                                            I last) {
  typename R::AccT acc = R::identity();
  if constexpr (VEC > 1) {
    if (n % VEC == 0 && first % VEC == 0 && last % VEC == 0) {
      for (I r = first + threadIdx.x * VEC; r < last; r += blockDim.x * VEC) {
        typename Load::Value v[VEC];
        load.template vec<VEC>(base + r, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc = R::combine(acc, R::make(v[k], r + k));
      }
      return acc;
    }
  }
  for (I r = first + threadIdx.x; r < last; r += blockDim.x)
    acc = R::combine(acc, R::make(load(base + r), r));
  return acc;
}

// Inner reduction, one block per row: input viewed as [rows, n], reduced
// over the contiguous n.
template <class R, class I, int VEC, class Load, class Store>
__device__ __forceinline__ void reduce_inner_block(const Load& load, const Store& store, I rows,
                                                   I n) {
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const typename R::AccT acc =
        block_reduce<R>(inner_row_range<R, I, VEC>(load, row * n, n, I(0), n));
    if (threadIdx.x == 0) store(row, acc, n);
  }
}

// Note [Split inner reductions]
// reduce_inner_block gives each row one block, so a reduction into few
// rows runs on as many SMs: BERT's MSE loss, mean over 4096 x 768 f32 into
// one value, took 720 us on an H100. The split form cuts each row into
// chunks of `chunk` elements: reduce_inner_partials writes one accumulator
// per (chunk, row) to partials[chunk * rows + row]; reduce_inner_totals
// gives each row a block that combines its partials in a fixed tree (so
// results do not change from run to run) and runs the Store as
// reduce_inner_block does (the row as the output index, the whole row
// length as n for mean and var). A block per row, not a thread as the
// outer totals give each column: the rows are few and each has hundreds of
// partials (BERT's loss: 384), which reduce_outer_totals' eight threads a
// column read in 8.8 us. The host makes chunk a multiple of 256 elements
// so that every chunk starts on a whole vector; any chunk is correct (an
// unaligned one reads scalars).
template <class R, class I, int VEC, class Load>
__device__ __forceinline__ void reduce_inner_partials(const Load& load, I rows, I n, I chunk,
                                                      typename R::AccT* partials) {
  static_assert(sizeof(typename R::AccT) <= 32,
                "the runtime sizes the workspace at 32 bytes a partial");
  const I splits = (n + chunk - 1) / chunk;
  for (I b = blockIdx.x; b < splits * rows; b += gridDim.x) {
    const I split = b / rows;
    const I row = b % rows;
    const I first = split * chunk;
    const I last = first + chunk < n ? first + chunk : n;
    const typename R::AccT acc =
        block_reduce<R>(inner_row_range<R, I, VEC>(load, row * n, n, first, last));
    if (threadIdx.x == 0) partials[split * rows + row] = acc;
  }
}

template <class R, class I, class Store>
__device__ __forceinline__ void reduce_inner_totals(const Store& store, I rows, I n, I chunk,
                                                    const typename R::AccT* partials) {
  const I splits = (n + chunk - 1) / chunk;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    typename R::AccT acc = R::identity();
    for (I split = threadIdx.x; split < splits; split += blockDim.x)
      acc = R::combine(acc, partials[split * rows + row]);
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) store(row, acc, n);
  }
}

// The rows of an Inner reduction, one warp per row: for short rows, where a
// whole block per row would leave most threads idle. The xor shuffles leave
// the row's accumulator in every lane; `done(row, acc, base, lane)` follows
// each row.
template <class R, class I, class Load, class Done>
__device__ __forceinline__ void warp_rows(const Load& load, I rows, I n, const Done& done) {
  typedef typename R::AccT Acc;
  const I warps_per_block = blockDim.x / 32;
  const I lane = threadIdx.x % 32;
  const I first = static_cast<I>(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  for (I row = first; row < rows; row += static_cast<I>(gridDim.x) * warps_per_block) {
    const I base = row * n;
    Acc acc = R::identity();
    for (I r = lane; r < n; r += 32) acc = R::combine(acc, R::make(load(base + r), r));
    done(row, warp_reduce<R>(acc), base, lane);
  }
}

template <class R, class I, class Load, class Store>
__device__ __forceinline__ void reduce_inner_warp(const Load& load, const Store& store, I rows,
                                                  I n) {
  warp_rows<R>(load, rows, n, [&](I row, const typename R::AccT& acc, I, I lane) {
    if (lane == 0) store(row, acc, n);
  });
}

// Note [Row epilogues] (spec/kernel_spec.h): the row's elementwise work
// after its reduction, shared by the `step` threads that reduced it (a
// block or a warp; this one is `lane`), each holding the row's values.
// ROW_VEC > 1 takes whole vectors when the row is whole vectors
// (row_store.vec: every tensor dense or periodic).
template <int ROW_VEC, class I, class RowStore, class Values>
__device__ __forceinline__ void row_epilogue(const RowStore& row_store, const Values& values,
                                             I base, I n, I lane, I step) {
  if constexpr (ROW_VEC > 1) {
    if (n % ROW_VEC == 0) {
      for (I r = lane * ROW_VEC; r < n; r += step * ROW_VEC)
        row_store.template vec<ROW_VEC>(base + r, values);
      return;
    }
  }
  for (I r = lane; r < n; r += step) row_store(base + r, values);
}

// Inner reduction with a row epilogue, one block per row: every thread
// takes the reduced value (block_reduce returns it to all), runs the Store
// (thread 0 stores), then its share of the row epilogue. The row was just
// read, so the epilogue's loads of it mostly hit the caches.
template <class R, class I, int VEC, int ROW_VEC, class Load, class Store, class RowStore>
__device__ __forceinline__ void reduce_inner_block_rows(const Load& load, const Store& store,
                                                        const RowStore& row_store, I rows, I n) {
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const typename R::AccT acc =
        block_reduce<R>(inner_row_range<R, I, VEC>(load, row * n, n, I(0), n));
    const auto values = store(row, acc, n, threadIdx.x == 0);
    row_epilogue<ROW_VEC>(row_store, values, row * n, n, static_cast<I>(threadIdx.x),
                          static_cast<I>(blockDim.x));
  }
}

// The same with a warp per row (short rows).
template <class R, class I, int VEC, int ROW_VEC, class Load, class Store, class RowStore>
__device__ __forceinline__ void reduce_inner_warp_rows(const Load& load, const Store& store,
                                                       const RowStore& row_store, I rows, I n) {
  static_assert(VEC == 1, "a warp per row reads scalars");
  warp_rows<R>(load, rows, n, [&](I row, const typename R::AccT& acc, I base, I lane) {
    const auto values = store(row, acc, n, lane == 0);
    row_epilogue<ROW_VEC>(row_store, values, base, n, lane, I(32));
  });
}

// Note [Outer reduction tiles]
// Outer reduction: input viewed as [outer, n, inner], reduced over n. A
// block (32, 8) owns a tile of kOuterTileColumns adjacent columns: lane x
// takes columns x, x + 32, x + 64, ... (each load coalesced across the
// warp), thread row y takes every 8th row, and the 8 partial results meet in
// shared memory. One column per thread kept a quarter of the loads in flight
// that HBM needs: a ViT-B/16 bias-gradient sum ran at 0.7 TB/s. The host
// sizes grids by the same tile width; the emitted source asserts the two
// agree.
//
// Note [Narrow outer tiles]
// Four columns a thread and eight thread rows leave a small reduction few
// blocks and long loops: the global average pool closing a channels-last
// CNN at batch 1 (a batch norm and hardswish, then the mean of [1, 49, 960]
// over its 49 rows) ran on 8 blocks of 128 columns and took 11.8 us on an
// H200, the same reduction over an NCHW input 1.6 us; a squeeze-excitation
// mean over [1, 196, 336] took the split form's two kernels, 5.2 us. Kernels
// with Outer axis therefore also carry an entry whose block is (32, 32): one
// column a thread, 32 columns a block, 32 thread rows, one launch. The
// runtime launches it for columns too few for the wide tiles to fill the
// GPU and rows short enough (kNarrowOuterMaxRows) for 32 thread rows.
constexpr int kOuterColumnsPerThread = 4;
constexpr int kOuterTileColumns = 32 * kOuterColumnsPerThread;
constexpr int kNarrowOuterTileColumns = 32;

// A Load that also takes the element's row of the [outer, n] view declares
// `static constexpr bool kTakesRow = true`: it needs the row (per-row
// statistics) and would otherwise divide the linear index by the row
// length for every element.
template <class Load>
__device__ constexpr auto load_takes_row(int) -> decltype(Load::kTakesRow) {
  return Load::kTakesRow;
}
template <class Load>
__device__ constexpr bool load_takes_row(long) {
  return false;
}

template <class Load, class I>
__device__ __forceinline__ auto load_at(const Load& load, I linear, I row) {
  if constexpr (load_takes_row<Load>(0)) {
    return load(linear, row);
  } else {
    (void)row;
    return load(linear);
  }
}

// Rows [first, last) of the tile at column col0 of slice o; on return
// thread row 0 holds the tile's column results in acc.
// C columns a thread, 32 * C a tile; at most ROWS thread rows (blockDim.y).
template <class R, class I, class Load, int C, int ROWS = 8>
__device__ __forceinline__ void outer_tile(const Load& load, I o, I n, I inner, I col0, I first,
                                           I last, typename R::AccT (&acc)[C]) {
  typedef typename R::AccT Acc;
  __shared__ Acc tile[ROWS][32 * C + 1];  // +1: no bank conflicts on the column walk
#pragma unroll
  for (int j = 0; j < C; ++j) acc[j] = R::identity();
  const I lane_col = col0 + threadIdx.x;
  if (col0 + 32 * C <= inner) {
#pragma unroll 4
    for (I r = first + threadIdx.y; r < last; r += blockDim.y) {
      const I row = o * n + r;
      const I at = row * inner + lane_col;
      decltype(load_at(load, at, row)) v[C];
#pragma unroll
      for (int j = 0; j < C; ++j) v[j] = load_at(load, at + 32 * j, row);
#pragma unroll
      for (int j = 0; j < C; ++j) acc[j] = R::combine(acc[j], R::make(v[j], r));
    }
  } else {
    for (I r = first + threadIdx.y; r < last; r += blockDim.y) {
      const I row = o * n + r;
      const I at = row * inner + lane_col;
#pragma unroll
      for (int j = 0; j < C; ++j) {
        if (lane_col + 32 * j < inner)
          acc[j] = R::combine(acc[j], R::make(load_at(load, at + 32 * j, row), r));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < C; ++j) tile[threadIdx.y][threadIdx.x + 32 * j] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int y = 1; y < static_cast<int>(blockDim.y); ++y) {
#pragma unroll
      for (int j = 0; j < C; ++j) acc[j] = R::combine(acc[j], tile[y][threadIdx.x + 32 * j]);
    }
  }
  __syncthreads();  // the next tile overwrites `tile`
}

// C columns a thread, ROWS thread rows a block (Note [Narrow outer tiles]).
template <class R, class I, class Load, class Store, int C = kOuterColumnsPerThread, int ROWS = 8>
__device__ __forceinline__ void reduce_outer(const Load& load, const Store& store, I outer, I n,
                                             I inner) {
  typename R::AccT acc[C];
  const I col_tiles = (inner + 32 * C - 1) / (32 * C);
  for (I b = blockIdx.x; b < outer * col_tiles; b += gridDim.x) {
    const I o = b / col_tiles;
    const I col0 = (b % col_tiles) * (32 * C);
    outer_tile<R, I, Load, C, ROWS>(load, o, n, inner, col0, I(0), n, acc);
    if (threadIdx.y != 0) continue;
#pragma unroll
    for (int j = 0; j < C; ++j) {
      const I col = col0 + threadIdx.x + 32 * j;
      if (col < inner) store(o * inner + col, acc[j], n);
    }
  }
}

// Note [Split outer reductions]
// reduce_outer gives each block one column tile and all n rows, so a
// reduction into few columns (a bias gradient sum(G[12608, 768], 0): six
// tiles) leaves most of an H100 idle. The split form cuts n into chunks of
// `chunk` rows: reduce_outer_partials writes one accumulator per (chunk,
// column) to a workspace, then reduce_outer_totals combines each column's
// partials in chunk order (deterministic, no atomics) and runs the Store.
// The runtime picks the split form and the chunk count; the plain form
// stays for reductions with enough columns of their own.
template <class R, class I, class Load>
__device__ __forceinline__ void reduce_outer_partials(const Load& load, I outer, I n, I inner,
                                                      I chunk, typename R::AccT* partials) {
  static_assert(sizeof(typename R::AccT) <= 32,
                "the runtime sizes the workspace at 32 bytes a partial");
  typename R::AccT acc[kOuterColumnsPerThread];
  const I col_tiles = (inner + kOuterTileColumns - 1) / kOuterTileColumns;
  const I splits = (n + chunk - 1) / chunk;
  for (I b = blockIdx.x; b < splits * outer * col_tiles; b += gridDim.x) {
    const I split = b / (outer * col_tiles);
    const I o = (b / col_tiles) % outer;
    const I col0 = (b % col_tiles) * kOuterTileColumns;
    const I first = split * chunk;
    const I last = first + chunk < n ? first + chunk : n;
    outer_tile<R>(load, o, n, inner, col0, first, last, acc);
    if (threadIdx.y != 0) continue;
#pragma unroll
    for (int j = 0; j < kOuterColumnsPerThread; ++j) {
      const I col = col0 + threadIdx.x + 32 * j;
      if (col < inner) partials[(split * outer + o) * inner + col] = acc[j];
    }
  }
}

// A block (32, 8) per 32 results: lane x takes one result, thread row y
// every 8th chunk, so a column's partials are read by eight threads at once.
template <class R, class I, class Store>
__device__ __forceinline__ void reduce_outer_totals(const Store& store, I outer, I n, I inner,
                                                    I chunk, const typename R::AccT* partials) {
  typedef typename R::AccT Acc;
  __shared__ Acc tile[8][33];
  const I splits = (n + chunk - 1) / chunk;
  const I results = outer * inner;
  for (I b = blockIdx.x; b < (results + 31) / 32; b += gridDim.x) {
    const I out = b * 32 + threadIdx.x;
    Acc acc = R::identity();
    if (out < results) {
#pragma unroll 4
      for (I split = threadIdx.y; split < splits; split += blockDim.y)
        acc = R::combine(acc, partials[split * results + out]);
    }
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && out < results) {
      for (int y = 1; y < static_cast<int>(blockDim.y); ++y)
        acc = R::combine(acc, tile[y][threadIdx.x]);
      store(out, acc, n);
    }
    __syncthreads();
  }
}

}  // namespace mb
