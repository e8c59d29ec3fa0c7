// Group norm's statistics (Note [Group-norm statistics] in
// mybackend/ops/group_norm.py): per (image, group) the mean and 1 / sqrt(var +
// eps) of x, in either layout.
//
// Note [Group-norm units]
// The data is viewed as `images` matrices [rows, cols] with the columns
// contiguous, and each image's columns are cut into units of
// `unit_cols` adjacent columns; unit u (of N * G) is one group of one image:
// - channels-last x [N, C, spatial...]: an image is [spatial, C], a unit is
//   the C / G channels of a group (units_per_image = G);
// - contiguous x: a group's C / G * spatial values are one run of memory,
//   viewed as [run / cols, cols] (cols a vector multiple dividing the run);
//   an image is one group, and its one unit is all its columns.
// Stage one is batch norm's chunk stage per image (channel_welford_chunk):
// per (image, chunk, column) a Welford state. Stage two combines a unit's
// chunks and columns in a fixed order, a block per unit (deterministic, as
// batch norm's totals), and writes the unit's mean and rstd in x's dtype
// (native_group_norm's saved statistics, [N, G]) and, for each of the
// group's channels, both in fp32 ([N, C]: the elementwise part of the norm
// reads them per channel, so no op expands [N, G] to channels).
#pragma once

#include "mb_batch_norm.cuh"

namespace mb {

template <class T, class I, int VEC, int U, int LANES>
__device__ __forceinline__ void group_norm_stats_partials(const T* __restrict__ x,
                                                          Welford<float>* __restrict__ partials,
                                                          I rows, I cols, I splits, I images) {
  const I per_image = channel_tiles<VEC, LANES>(cols) * splits;
  for (I b = blockIdx.x; b < per_image * images; b += gridDim.x) {
    const I image = b / per_image;
    channel_welford_chunk<T, I, VEC, U, LANES>(x + image * rows * cols,
                                               partials + image * splits * cols, b % per_image,
                                               rows, cols, splits);
  }
}

// A block of kTotalsBlock threads per unit: each thread combines every
// kTotalsBlock-th state of the unit's chunks and columns, the warps merge
// by shuffles and then through shared memory, in a fixed order.
template <class W, class I>
__device__ __forceinline__ void group_norm_stats_totals(const Welford<float>* __restrict__ partials,
                                                        W* __restrict__ mean, W* __restrict__ rstd,
                                                        float* __restrict__ channel_mean,
                                                        float* __restrict__ channel_rstd, I cols,
                                                        I splits, I units_per_image, I unit_cols,
                                                        I units, I group_channels, double eps) {
  typedef WelfordReducer<float> R;
  __shared__ Welford<float> warp_states[kTotalsBlock / 32];
  __shared__ float unit_stats[2];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (I u = blockIdx.x; u < units; u += gridDim.x) {
    const I image = u / units_per_image;
    const I first = (u % units_per_image) * unit_cols;
    const Welford<float>* p = partials + image * splits * cols + first;
    const I count = splits * unit_cols;
    Welford<float> acc = R::identity();
    for (I k = threadIdx.x; k < count; k += kTotalsBlock)
      acc = R::combine(acc, p[(k / unit_cols) * cols + k % unit_cols]);
#pragma unroll
    for (int m = 16; m > 0; m /= 2) acc = R::combine(acc, R::shfl(acc, m));
    if (lane == 0) warp_states[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      Welford<float> total = R::identity();
      for (int w = 0; w < kTotalsBlock / 32; ++w) total = R::combine(total, warp_states[w]);
      const float var = fmaxf(total.m2 / total.n, 0.f);
      unit_stats[0] = total.mean;
      unit_stats[1] = rsqrtf(var + static_cast<float>(eps));
      mean[u] = from_compute<W>(unit_stats[0]);
      rstd[u] = from_compute<W>(unit_stats[1]);
    }
    __syncthreads();
    for (I c = threadIdx.x; c < group_channels; c += kTotalsBlock) {
      channel_mean[u * group_channels + c] = unit_stats[0];
      channel_rstd[u * group_channels + c] = unit_stats[1];
    }
    __syncthreads();  // warp_states and unit_stats are reused by the next unit
  }
}

}  // namespace mb
