// The loop of a generated tiled transposing copy (Note [Tiled transposing
// copies] in fusion/transposed_copies.h). The emitter supplies an Element
// functor (what one input element becomes, in the output's compute type);
// the tile walk is here.
//
// Note [Transpose tiles]
// The input is [batch, a, b] with b contiguous, the output [batch, b, a]
// with a contiguous. A block takes a tile of TA x TB elements of one batch
// entry, reads it row by row along b into shared memory, and writes it
// column by column along a. Both walks are flat: thread t takes tile
// elements t, t + THREADS, ... in the order of the side it accesses, so a
// warp touches 32 consecutive elements of a run, and where the tile holds
// whole runs (all of b, or all of a) the next run continues the same
// stretch of memory. Each thread issues all its loads (up to TA * TB /
// THREADS) before it writes any of them to shared memory, so they are in
// flight together.
//
// The planner sizes the tile from the static shape (transpose_tile in
// fusion/transposed_copies.cpp), to about 8 KiB of the widest dtype:
// - rows of b up to 64 elements are taken whole (TB = b: 9 for a 3x3
//   weight, 49 for a 7x7), with as many rows of a as fit (TA = a when the
//   whole [a, b] slab does: a weight's block copies one contiguous slab into
//   another); a tile of 32 wide rows would leave most lanes of a 9-element
//   row idle and read each row as its own short burst;
// - longer rows are cut into pieces of TB elements beside TA <= 64 rows
//   (64 x 64 for 16-bit data, 64 x 32 for fp32; a 3-row tile of an image's
//   channels takes 1024-element pieces instead).
// A block has 256 threads, or one per element (rounded up to a warp) of a
// smaller tile. TA and TB are compile-time constants, so the flat walks
// divide by constants; sizes are arguments and partial tiles are masked, so
// any tile is correct for any size.
//
// Shared memory holds the tile in the output's compute type (float for
// 16-bit data: what a 32-bit bank holds), rows of PITCH = TB | 1 elements.
// The write walk reads a column, consecutive rows apart: with an odd pitch
// 32 consecutive rows fall in 32 different banks, where an even pitch (32,
// 64) would put a whole warp in one bank. The read walk writes rows in
// order: a warp that crosses a row's end meets at most a two-way conflict.
#pragma once

#include "mb_math.cuh"
#include "mb_vector_io.cuh"

namespace mb {

// Sizes and strides (in elements) of one call: kernel arguments, never in
// the source (Note [Specs hold no sizes]).
template <class I>
struct TransposeShape {
  I batch, a, b;
  I in_batch, in_a, in_b;
  I out_batch, out_a, out_b;
};

// Note [Vector tile walks]
// Scalar accesses of 2-byte elements move 64 bytes per warp instruction, and
// a ResNet-18 weight copy ran at a third of the bandwidth (H200). Where the
// side a walk accesses is laid out for it, it moves 16-byte vectors instead:
// - the tile's part of the tensor is one run (its lines follow each other:
//   a weight's [a, 9] slab, whole output columns), vectors over the run and
//   scalars for its tail;
// - or each line is its own run whose length and pitch are multiples of a
//   vector (an activation's rows of 64 channels or pixels).
// Both need the run's start 16-byte aligned; any other tile takes the scalar
// walk, which is correct for every layout.
template <class T>
__device__ __forceinline__ bool aligned16(const T* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// The lines of a tile's side: `lines` runs of `width` elements, `pitch`
// apart. Returns the vector walk's shape, or false for the scalar walk.
template <int VEC, class T, class I>
__device__ __forceinline__ bool vector_lines(const T* base, I pitch, I step, int lines, int width,
                                             int& runs, int& run_width) {
  if (step != 1 || !aligned16(base)) return false;
  if (static_cast<I>(width) == pitch || lines == 1) {  // one run
    runs = 1;
    run_width = lines * width;
    return true;
  }
  if (width % VEC != 0 || pitch % VEC != 0) return false;
  runs = lines;
  run_width = width;
  return true;
}

// Reads a tile of `rows` lines of `cols` elements (rows `in_a` apart, elements
// `in_b` apart) into shared memory with vector loads; false when it cannot.
template <int TB, int THREADS, int PITCH, class In, class I, class V, class Element>
__device__ __forceinline__ bool read_vectors(const In* src, I in_a, I in_b, int rows, int cols,
                                             int thread, V* tile, const Element& element) {
  enum : int { VEC = 16 / static_cast<int>(sizeof(In)) };
  int runs = 0, width = 0;
  if (!vector_lines<VEC>(src, in_a, in_b, rows, cols, runs, width)) return false;
  const int per_run = width / VEC;
  for (int q = thread; q < runs * per_run; q += THREADS) {
    const int run = q / per_run;
    const int first = (q - run * per_run) * VEC;
    In raw[VEC];
    load_vec<VEC>(src + static_cast<I>(run) * in_a + first, raw);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const int k = run * width + first + e;  // the element's place in the tile, row-major
      const int r = runs == 1 ? k / cols : run;
      const int c = runs == 1 ? k - r * cols : first + e;
      tile[r * PITCH + c] = element(raw[e]);
    }
  }
  for (int k = per_run * VEC + thread; runs == 1 && k < width; k += THREADS) {  // the run's tail
    const int r = k / cols, c = k - (k / cols) * cols;
    tile[r * PITCH + c] = element(src[k]);
  }
  return true;
}

// Writes the tile's `cols` columns of `rows` elements (columns `out_b` apart,
// elements `out_a` apart) from shared memory with vector stores.
template <int TA, int THREADS, int PITCH, class Out, class I, class V>
__device__ __forceinline__ bool write_vectors(Out* dst, I out_b, I out_a, int cols, int rows,
                                              int thread, const V* tile) {
  enum : int { VEC = 16 / static_cast<int>(sizeof(Out)) };
  int runs = 0, width = 0;
  if (!vector_lines<VEC>(dst, out_b, out_a, cols, rows, runs, width)) return false;
  const int per_run = width / VEC;
  for (int q = thread; q < runs * per_run; q += THREADS) {
    const int run = q / per_run;
    const int first = (q - run * per_run) * VEC;
    Out raw[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const int k = run * width + first + e;  // column-major: k / rows is the column
      const int c = runs == 1 ? k / rows : run;
      const int r = runs == 1 ? k - c * rows : first + e;
      raw[e] = from_compute<Out>(tile[r * PITCH + c]);
    }
    store_vec<VEC>(dst + static_cast<I>(run) * out_b + first, raw);
  }
  for (int k = per_run * VEC + thread; runs == 1 && k < width; k += THREADS) {
    const int c = k / rows, r = k - (k / rows) * rows;
    dst[k] = from_compute<Out>(tile[r * PITCH + c]);
  }
  return true;
}

template <int TA, int TB, int THREADS, class I, class In, class Out, class Element>
__device__ __forceinline__ void transpose_tiles(const In* __restrict__ in, Out* __restrict__ out,
                                                const TransposeShape<I>& s,
                                                const Element& element) {
  typedef typename Element::Value V;
  enum : int { PITCH = TB | 1, TILE = TA * TB, STEPS = (TILE + THREADS - 1) / THREADS };
  __shared__ V tile[TA * PITCH];
  const I tiles_a = (s.a + TA - 1) / TA;
  const I tiles_b = (s.b + TB - 1) / TB;
  const I tiles = s.batch * tiles_a * tiles_b;
  const int thread = static_cast<int>(threadIdx.x);
  // Grid-stride over tiles (Note [Kernel ABI]): b fastest, then a, then batch.
  for (I t = static_cast<I>(blockIdx.x); t < tiles; t += static_cast<I>(gridDim.x)) {
    const I rest = t / tiles_b;
    const I b0 = (t - rest * tiles_b) * TB;
    const I z = rest / tiles_a;
    const I a0 = (rest - z * tiles_a) * TA;
    const int rows = s.a - a0 < TA ? static_cast<int>(s.a - a0) : TA;
    const int cols = s.b - b0 < TB ? static_cast<int>(s.b - b0) : TB;
    const In* src = in + z * s.in_batch + a0 * s.in_a + b0 * s.in_b;
    Out* dst = out + z * s.out_batch + a0 * s.out_a + b0 * s.out_b;
    // Read along b: tile element k is row k / TB, column k % TB.
    if (!read_vectors<TB, THREADS, PITCH>(src, s.in_a, s.in_b, rows, cols, thread, tile, element)) {
      V held[STEPS];
#pragma unroll
      for (int j = 0; j < STEPS; ++j) {
        const int k = thread + j * THREADS;
        const int r = k / TB, c = k - (k / TB) * TB;
        held[j] = k < TILE && r < rows && c < cols ? element(src[r * s.in_a + c * s.in_b]) : V(0);
      }
#pragma unroll
      for (int j = 0; j < STEPS; ++j) {
        const int k = thread + j * THREADS;
        const int r = k / TB, c = k - (k / TB) * TB;
        if (k < TILE && r < rows && c < cols) tile[r * PITCH + c] = held[j];
      }
    }
    __syncthreads();
    // Write along a: tile element k is column k / TA, row k % TA.
    if (!write_vectors<TA, THREADS, PITCH>(dst, s.out_b, s.out_a, cols, rows, thread, tile)) {
#pragma unroll
      for (int j = 0; j < STEPS; ++j) {
        const int k = thread + j * THREADS;
        const int c = k / TA, r = k - (k / TA) * TA;
        if (k < TILE && r < rows && c < cols)
          dst[c * s.out_b + r * s.out_a] = from_compute<Out>(tile[r * PITCH + c]);
      }
    }
    // The next tile overwrites this one.
    __syncthreads();
  }
}

}  // namespace mb
