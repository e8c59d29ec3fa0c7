// The loop of a generated 2-d max-pool kernel (Note [Pool groups] in
// fusion/pool_planner.h). The emitter supplies a Load functor (the
// prologue at one window element: VEC channels' values) and a Store functor
// (VEC pooled values and, when stored, their indices); the window walk and
// the comparison are here, so every variant pools alike.
//
// The loop is grid-stride over output elements (NCHW) or output pixels'
// channel vectors (NHWC), so any grid size is correct. The backward
// (max_pool2d_backward) walks the input space the same way.
#pragma once

#include "mb_math.cuh"
#include "mb_vector_io.cuh"

namespace mb {

// Sizes and window geometry of one call: kernel arguments, never in the
// source (Note [Specs hold no sizes]).
template <class I>
struct PoolShape {
  I batch, channels, in_h, in_w, out_h, out_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// The element (NCHW) or pixel channel vector (NHWC) at `linear` of a
// [N, C, height, width] tensor dense in the kernel's layout.
template <bool CHANNELS_LAST, int VEC, class I>
struct PoolSite {
  I n, c, y, x;
  __device__ __forceinline__ PoolSite(I linear, I channels, I height, I width) {
    if constexpr (CHANNELS_LAST) {
      const I vectors = channels / VEC;
      c = (linear % vectors) * VEC;
      I rest = linear / vectors;
      x = rest % width;
      rest /= width;
      y = rest % height;
      n = rest / height;
    } else {
      x = linear % width;
      I rest = linear / width;
      y = rest % height;
      rest /= height;
      c = rest % channels;
      n = rest / channels;
    }
  }
};

// Offset of (n, c, y, x) in a [N, C, height, width] tensor dense in the
// kernel's layout.
template <bool CHANNELS_LAST, class I>
__device__ __forceinline__ I pool_offset(I n, I c, I y, I x, I channels, I height, I width) {
  return CHANNELS_LAST ? ((n * height + y) * width + x) * channels + c
                       : ((n * channels + c) * height + y) * width + x;
}

// Eager's window walk (aten/src/ATen/native/cuda/DilatedMaxPool2d.cu): the
// window starts at o * stride - pad, steps by the dilation, and positions
// outside the input (padding) are skipped, never compared. An element
// replaces the best so far when it is greater or NaN, so ties keep the
// first element in scan order and a NaN propagates (the last NaN's index,
// as eager's). The index starts at the window's first valid position, so an
// all -inf window reports that position, as eager's NCHW kernel does.
template <bool CHANNELS_LAST, int VEC, class I, class Load, class Store>
__device__ __forceinline__ void max_pool2d(const Load& load, const Store& store,
                                           const PoolShape<I>& s) {
  typedef typename Load::Value V;
  const I sites = s.batch * s.out_h * s.out_w * (CHANNELS_LAST ? s.channels / VEC : s.channels);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I linear = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x;
       linear < sites; linear += step) {
    const PoolSite<CHANNELS_LAST, VEC, I> at(linear, s.channels, s.out_h, s.out_w);
    I h0 = at.y * s.stride_h - s.pad_h;
    I w0 = at.x * s.stride_w - s.pad_w;
    const I h1 = minimum(h0 + static_cast<I>(s.kernel_h - 1) * s.dilation_h + 1, s.in_h);
    const I w1 = minimum(w0 + static_cast<I>(s.kernel_w - 1) * s.dilation_w + 1, s.in_w);
    while (h0 < 0) h0 += s.dilation_h;
    while (w0 < 0) w0 += s.dilation_w;
    const typename Load::Fixed fixed = load.fixed(at.c);
    V best[VEC];
    I where[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      best[k] = Limits<V>::lowest();
      where[k] = h0 * s.in_w + w0;
    }
    for (I h = h0; h < h1; h += s.dilation_h) {
      for (I w = w0; w < w1; w += s.dilation_w) {
        const I offset = pool_offset<CHANNELS_LAST>(at.n, at.c, h, w, s.channels, s.in_h, s.in_w);
        V v[VEC];
        load(fixed, offset, at.n, at.c, h, w, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          if (v[k] > best[k] || is_nan(v[k])) {
            best[k] = v[k];
            where[k] = h * s.in_w + w;
          }
        }
      }
    }
    // NHWC: the output is [N, OH, OW, C] and linear counts its vectors.
    store(CHANNELS_LAST ? linear * VEC : linear, best, where);
  }
}

// The backward (PoolSpec::backward): each thread owns input elements, so
// the gradient is a gather, with no atomics and no zero-fill pass. The
// windows that may cover input row h are those whose dilated span reaches
// it, [ph0, ph1) as in eager's kernels; a window adds its gradient only
// where its index names this element, which also rules out windows whose
// dilation steps over it. The indices are read first (one vector of VEC
// i64) and the gradient (the Load functor: the prologue over the output
// space) only when some channel of the vector matches, so windows that
// chose another element cost one index load.
template <bool CHANNELS_LAST, int VEC, class I, class Load, class Store>
__device__ __forceinline__ void max_pool2d_backward(const Load& load,
                                                    const i64* __restrict__ indices,
                                                    const Store& store, const PoolShape<I>& s) {
  typedef typename Load::Value V;
  const I sites = s.batch * s.in_h * s.in_w * (CHANNELS_LAST ? s.channels / VEC : s.channels);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  const I span_h = static_cast<I>(s.kernel_h - 1) * s.dilation_h + 1;
  const I span_w = static_cast<I>(s.kernel_w - 1) * s.dilation_w + 1;
  for (I linear = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x;
       linear < sites; linear += step) {
    const PoolSite<CHANNELS_LAST, VEC, I> at(linear, s.channels, s.in_h, s.in_w);
    const I h = at.y + s.pad_h, w = at.x + s.pad_w;
    const I ph0 = h < span_h ? 0 : (h - span_h) / s.stride_h + 1;
    const I pw0 = w < span_w ? 0 : (w - span_w) / s.stride_w + 1;
    const I ph1 = minimum(h / s.stride_h + 1, s.out_h);
    const I pw1 = minimum(w / s.stride_w + 1, s.out_w);
    const i64 self = static_cast<i64>(at.y) * s.in_w + at.x;
    const typename Load::Fixed fixed = load.fixed(at.c);
    V sum[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum[k] = V(0);
    for (I ph = ph0; ph < ph1; ++ph) {
      for (I pw = pw0; pw < pw1; ++pw) {
        const I offset =
            pool_offset<CHANNELS_LAST>(at.n, at.c, ph, pw, s.channels, s.out_h, s.out_w);
        i64 chosen[VEC];
        load_vec<VEC>(indices + offset, chosen);
        bool any = false;
#pragma unroll
        for (int k = 0; k < VEC; ++k) any |= chosen[k] == self;
        if (!any) continue;
        V g[VEC];
        load(fixed, offset, at.n, at.c, ph, pw, g);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          if (chosen[k] == self) sum[k] += g[k];
        }
      }
    }
    store(CHANNELS_LAST ? linear * VEC : linear, sum);
  }
}

}  // namespace mb
