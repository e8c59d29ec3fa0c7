// Training batch norm's per-channel reductions (Note [Batch-norm reductions]
// in fusion/norm_lowering.h): the forward's mean and inverse standard
// deviation (with the running statistics' update), and the backward's
// parameter gradients sum(dy) and sum(dy * (x - mean)) * invstd. The data
// is viewed as [rows, cols] with the channels (cols) contiguous:
// channels-last images, or [N, C].
#pragma once

#include "mb_norm.cuh"

namespace mb {

// Note [Channel tiles]
// A block of kChannelBlock threads is `lanes` threads across the channels,
// each owning VEC adjacent channels read as one vector, times
// kChannelBlock / lanes row groups walking the rows. lanes is the smallest
// power of two whose vectors cover the channels, at most LANES (the
// emitter's choice, MYBACKEND_BN_MAX_LANES, 32 by default; at most the
// block): 8 for 64 bf16 channels (32 rows at a time), 32 for 256 and more.
// Wider rows take several column tiles. With LANES = 256, a block's width,
// 2048 channels had one row group a block, so the late layers' few rows
// were cut into many chunks, each writing a partial per channel: the
// statistics of 64x2048x7x7 bf16 took 20 us on an H200, 12.5-12.8 with 32.
// Each block reduces one row chunk of one column tile (each thread loading
// U rows before it accumulates them), merges its row groups in shared
// memory and writes one partial per channel; a second kernel
// (channel_totals) combines each channel's partials in a fixed order, so
// results do not depend on timing. The launcher (batch_norm_kernel.cpp)
// computes lanes and the chunk count the same way.
enum : int { kChannelBlock = 256 };

template <int VEC, int LANES>
__device__ __forceinline__ int channel_lanes(long long cols) {
  static_assert(LANES <= kChannelBlock, "lanes beyond the block");
  int lanes = 1;
  while (lanes < LANES && static_cast<long long>(lanes) * VEC < cols) lanes *= 2;
  return lanes;
}

// Where one thread works for block job b: its channels, its rows.
template <class I>
struct ChannelSlice {
  I channel;  // the first of this thread's VEC channels
  I row;      // this thread's first row
  I end;      // one past the chunk's last row
  I step;     // rows per pass: the number of row groups
  I split;    // the chunk
  int lane;
  int group;
  int groups;
};

// Column tiles of `cols` channels.
template <int VEC, int LANES, class I>
__device__ __forceinline__ I channel_tiles(I cols) {
  const I tile_cols = static_cast<I>(channel_lanes<VEC, LANES>(cols)) * VEC;
  return (cols + tile_cols - 1) / tile_cols;
}

template <int VEC, int LANES, class I>
__device__ __forceinline__ ChannelSlice<I> channel_slice(I b, I rows, I cols, I splits) {
  const int lanes = channel_lanes<VEC, LANES>(cols);
  const I tile_cols = static_cast<I>(lanes) * VEC;
  const I tiles = channel_tiles<VEC, LANES>(cols);
  const I chunk = (rows + splits - 1) / splits;
  ChannelSlice<I> s;
  s.lane = static_cast<int>(threadIdx.x) % lanes;
  s.group = static_cast<int>(threadIdx.x) / lanes;
  s.groups = kChannelBlock / lanes;
  s.split = b / tiles;
  s.channel = (b % tiles) * tile_cols + static_cast<I>(s.lane) * VEC;
  const I first = s.split * chunk;
  s.end = first + chunk < rows ? first + chunk : rows;
  s.row = first + s.group;
  s.step = s.groups;
  return s;
}

// Merges the row groups' accumulators into group 0's (a tree in shared
// memory). Every thread of the block (BLOCK threads) calls it; inactive
// lanes pass identities.
template <class R, int VEC, int BLOCK>
__device__ __forceinline__ void merge_row_groups(typename R::AccT (&acc)[VEC], int lane, int group,
                                                 int groups, int lanes) {
  __shared__ typename R::AccT tile[BLOCK * VEC];
  const int mine = (group * lanes + lane) * VEC;
#pragma unroll
  for (int k = 0; k < VEC; ++k) tile[mine + k] = acc[k];
  __syncthreads();
  for (int half = groups / 2; half > 0; half /= 2) {
    if (group < half) {
      const int other = ((group + half) * lanes + lane) * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        acc[k] = R::combine(acc[k], tile[other + k]);
        tile[mine + k] = acc[k];
      }
    }
    __syncthreads();
  }
}

// The chunk stage's threads load U rows (the emitter's choice, from
// MYBACKEND_BN_ROW_UNROLL) before they accumulate them: loads in flight,
// not a chain of one load, one update. The totals stage batches its loads
// the same way.
//
// Note [Loads in flight at storage width]
// The rows in flight stay in their storage type (8 bf16 in 4 registers) and
// are converted to fp32 where they are accumulated. Converted at the load,
// U = 4 rows of 8 channels held 32 fp32 registers per tensor: the
// statistics kernel took 88 registers a thread and the backward sums 125,
// so an H100 SM held 2 blocks of 256 threads (ptxas, sm_90). At storage
// width they take 72 and 80: 3 blocks, half as many bytes in flight again,
// without the spills a __launch_bounds__ cap causes (MYBACKEND_BN_MIN_BLOCKS).
enum : int { kTotalsUnroll = 8 };

// Stage two: a block of 32 channels x kTotalsGroups groups of chunks. Each
// thread combines every kTotalsGroups-th chunk of its channel (loads
// batched by kTotalsUnroll), the groups merge in shared memory, and
// `finish` stores the channel's results. Fixed order: deterministic.
enum : int { kTotalsLanes = 32, kTotalsGroups = 32, kTotalsBlock = kTotalsLanes * kTotalsGroups };

template <class R, class I, class Finish>
__device__ __forceinline__ void channel_totals(const typename R::AccT* __restrict__ partials,
                                               const Finish& finish, I cols, I splits) {
  typedef typename R::AccT Acc;
  constexpr int U = kTotalsUnroll;
  const int lane = static_cast<int>(threadIdx.x) % kTotalsLanes;
  const int group = static_cast<int>(threadIdx.x) / kTotalsLanes;
  for (I tile = blockIdx.x; tile * kTotalsLanes < cols; tile += gridDim.x) {
    const I c = tile * kTotalsLanes + lane;
    Acc acc[1] = {R::identity()};
    if (c < cols) {
      // Every batch U loads wide, the last one predicated: the same
      // combines in the same order as one at a time, in fewer round trips.
      for (I s = group; s < splits; s += U * kTotalsGroups) {
        Acc p[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (s + u * kTotalsGroups < splits) p[u] = partials[(s + u * kTotalsGroups) * cols + c];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (s + u * kTotalsGroups < splits) acc[0] = R::combine(acc[0], p[u]);
        }
      }
    }
    merge_row_groups<R, 1, kTotalsBlock>(acc, lane, group, kTotalsGroups, kTotalsLanes);
    if (group == 0 && c < cols) finish(c, acc[0]);
  }
}

// Stage one of the statistics: per (chunk, channel), the Welford state of
// the chunk's values. A thread sums its values shifted by the first one it
// reads of each channel, (v - shift) and (v - shift)^2, and turns the sums
// into a Welford state once: a few adds per element where Welford's update
// divides by the count for every row (measured on an H100: 1.3 TB/s with
// per-row Welford updates on 103 MB of bf16, where a copy moves 3 TB/s).
// Shifting by a sample of the same channel keeps the sums of the order of
// the spread, so the variance does not lose digits to a large mean.
// One job b of the chunk stage: a row chunk of one column tile. Group
// norm's statistics (mb_group_norm.cuh) run it per image.
template <class T, class I, int VEC, int U, int LANES>
__device__ __forceinline__ void channel_welford_chunk(const T* __restrict__ x,
                                                      Welford<float>* __restrict__ partials, I b,
                                                      I rows, I cols, I splits) {
  typedef WelfordReducer<float> R;
  const int lanes = channel_lanes<VEC, LANES>(cols);
  {
    const ChannelSlice<I> s = channel_slice<VEC, LANES>(b, rows, cols, splits);
    float shift[VEC], sum[VEC], squares[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) shift[k] = sum[k] = squares[k] = 0.f;
    float count = 0.f;
    if (s.channel < cols && s.row < s.end) {
      load_compute<VEC>(x + s.row * cols + s.channel, shift);
      for (I r = s.row; r < s.end; r += U * s.step) {
        T v[U][VEC];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (r + u * s.step < s.end)
            load_stored<VEC>(x + (r + u * s.step) * cols + s.channel, v[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (r + u * s.step >= s.end) break;
          count += 1.f;
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float d = to_compute(v[u][k]) - shift[k];
            sum[k] += d;
            squares[k] = fmaf(d, d, squares[k]);
          }
        }
      }
    }
    R::AccT acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float mean = count > 0.f ? sum[k] / count : 0.f;
      acc[k] = R::AccT{shift[k] + mean, fmaxf(squares[k] - sum[k] * mean, 0.f), count};
    }
    merge_row_groups<R, VEC, kChannelBlock>(acc, s.lane, s.group, s.groups, lanes);
    if (s.group == 0 && s.channel < cols) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) partials[s.split * cols + s.channel + k] = acc[k];
    }
  }
}

template <class T, class I, int VEC, int U, int LANES>
__device__ __forceinline__ void batch_norm_stats_partials(const T* __restrict__ x,
                                                          Welford<float>* __restrict__ partials,
                                                          I rows, I cols, I splits) {
  const I jobs = channel_tiles<VEC, LANES>(cols) * splits;
  for (I b = blockIdx.x; b < jobs; b += gridDim.x)
    channel_welford_chunk<T, I, VEC, U, LANES>(x, partials, b, rows, cols, splits);
}

// Finishes a channel: the saved mean and 1 / sqrt(var + eps) (biased
// variance, as ATen saves them) and the running statistics moved by
// `momentum` towards the batch's mean and unbiased variance.
template <class W>
struct BatchNormStatsFinish {
  float* __restrict__ mean;
  float* __restrict__ invstd;
  const W* __restrict__ running_mean;
  const W* __restrict__ running_var;
  W* __restrict__ new_running_mean;
  W* __restrict__ new_running_var;
  float momentum;
  float eps;
  template <class I>
  __device__ void operator()(I c, Welford<float> acc) const {
    const float var = acc.m2 / acc.n;
    mean[c] = acc.mean;
    invstd[c] = 1.f / sqrtf(var + eps);
    const float unbiased = acc.m2 / (acc.n - 1.f);
    new_running_mean[c] =
        from_compute<W>(momentum * acc.mean + (1.f - momentum) * to_compute(running_mean[c]));
    new_running_var[c] =
        from_compute<W>(momentum * unbiased + (1.f - momentum) * to_compute(running_var[c]));
  }
};

template <class W, class I>
__device__ __forceinline__ void batch_norm_stats_totals(
    const Welford<float>* __restrict__ partials, float* __restrict__ mean,
    float* __restrict__ invstd, const W* __restrict__ running_mean,
    const W* __restrict__ running_var, W* __restrict__ new_running_mean,
    W* __restrict__ new_running_var, I cols, I splits, double momentum, double eps) {
  const BatchNormStatsFinish<W> finish{mean,
                                       invstd,
                                       running_mean,
                                       running_var,
                                       new_running_mean,
                                       new_running_var,
                                       static_cast<float>(momentum),
                                       static_cast<float>(eps)};
  channel_totals<WelfordReducer<float> >(partials, finish, cols, splits);
}

// Note [Gradient readers]
// The backward sums read dy through a reader G: StoredGrad loads it as
// stored; a prologue's Load functor (Note [Norm prologues] in
// fusion/norm_prologue.h) computes it from its inputs (the ReLU gradient's
// mask source and incoming gradient), so dy is never stored. Either holds
// the rows in flight at storage width (Note [Loads in flight at storage
// width]): hold<N>(i, held) loads N elements of each tensor into a
// G::Held<N>, values<N>(held, out) converts them (and, for a prologue,
// computes dy) where they are accumulated.
template <class T>
struct StoredGrad {
  const T* __restrict__ p;
  template <int N>
  struct Held {
    T r[N];
  };
  template <int N, class I>
  __device__ __forceinline__ void hold(I i, Held<N>& h) const {
    load_stored<N>(p + i, h.r);
  }
  template <int N>
  __device__ __forceinline__ void values(const Held<N>& h, float (&out)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_compute(h.r[k]);
  }
};

// Stage one of the backward sums: per (chunk, channel), sum(dy) and
// sum(dy * (x - mean)), dy read through G (Note [Gradient readers]).
template <class T, class I, int VEC, int U, int LANES, class G>
__device__ __forceinline__ void batch_norm_backward_partials(const G& grad_out,
                                                             const T* __restrict__ x,
                                                             const float* __restrict__ mean,
                                                             Pair<float>* __restrict__ partials,
                                                             I rows, I cols, I splits) {
  typedef PairSumReducer<float> R;
  const int lanes = channel_lanes<VEC, LANES>(cols);
  const I jobs = channel_tiles<VEC, LANES>(cols) * splits;
  for (I b = blockIdx.x; b < jobs; b += gridDim.x) {
    const ChannelSlice<I> s = channel_slice<VEC, LANES>(b, rows, cols, splits);
    R::AccT acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = R::identity();
    if (s.channel < cols) {
      float mu[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) mu[k] = mean[s.channel + k];
      for (I r = s.row; r < s.end; r += U * s.step) {
        typename G::template Held<VEC> g[U];
        T v[U][VEC];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (r + u * s.step >= s.end) continue;
          const I at = (r + u * s.step) * cols + s.channel;
          grad_out.template hold<VEC>(at, g[u]);
          load_stored<VEC>(x + at, v[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (r + u * s.step >= s.end) break;
          float dy[VEC];
          grad_out.template values<VEC>(g[u], dy);
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float gk = dy[k];
            acc[k].a += gk;
            acc[k].b += gk * (to_compute(v[u][k]) - mu[k]);
          }
        }
      }
    }
    merge_row_groups<R, VEC, kChannelBlock>(acc, s.lane, s.group, s.groups, lanes);
    if (s.group == 0 && s.channel < cols) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) partials[s.split * cols + s.channel + k] = acc[k];
    }
  }
}

// The parameter gradients of a channel: grad_bias = sum(dy) and
// grad_weight = sum(dy * (x - mean)) * invstd, in fp32.
struct BatchNormBackwardFinish {
  const float* __restrict__ invstd;
  float* __restrict__ grad_bias;
  float* __restrict__ grad_weight;
  template <class I>
  __device__ void operator()(I c, Pair<float> sums) const {
    grad_bias[c] = sums.a;
    grad_weight[c] = sums.b * invstd[c];
  }
};

template <class I>
__device__ __forceinline__ void batch_norm_backward_totals(const Pair<float>* __restrict__ partials,
                                                           const float* __restrict__ invstd,
                                                           float* __restrict__ grad_bias,
                                                           float* __restrict__ grad_weight, I cols,
                                                           I splits) {
  const BatchNormBackwardFinish finish{invstd, grad_bias, grad_weight};
  channel_totals<PairSumReducer<float> >(partials, finish, cols, splits);
}

}  // namespace mb
