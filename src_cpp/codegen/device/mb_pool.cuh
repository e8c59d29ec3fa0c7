// The loop of a generated 2-d max-pool kernel (Note [Pool groups] in
// fusion/pool_planner.h). The emitter supplies a Load functor (the
// prologue at one window element: VEC channels' values) and a Store functor
// (VEC pooled values and, when stored, their indices); the window walk and
// the comparison are here, so every variant pools alike.
//
// The loop is grid-stride over output elements (NCHW) or output pixels'
// channel vectors (NHWC), so any grid size is correct.
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

// The output element (NCHW) or pixel channel vector (NHWC) at `linear`.
template <bool CHANNELS_LAST, int VEC, class I>
struct PoolSite {
  I n, c, oh, ow;
  __device__ __forceinline__ PoolSite(I linear, const PoolShape<I>& s) {
    if constexpr (CHANNELS_LAST) {
      const I vectors = s.channels / VEC;
      c = (linear % vectors) * VEC;
      I rest = linear / vectors;
      ow = rest % s.out_w;
      rest /= s.out_w;
      oh = rest % s.out_h;
      n = rest / s.out_h;
    } else {
      ow = linear % s.out_w;
      I rest = linear / s.out_w;
      oh = rest % s.out_h;
      rest /= s.out_h;
      c = rest % s.channels;
      n = rest / s.channels;
    }
  }
};

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
    const PoolSite<CHANNELS_LAST, VEC, I> at(linear, s);
    I h0 = at.oh * s.stride_h - s.pad_h;
    I w0 = at.ow * s.stride_w - s.pad_w;
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
        // Offset of (n, c, h, w) in a tensor of the window space dense in
        // the kernel's layout.
        const I offset = CHANNELS_LAST ? ((at.n * s.in_h + h) * s.in_w + w) * s.channels + at.c
                                       : ((at.n * s.channels + at.c) * s.in_h + h) * s.in_w + w;
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

}  // namespace mb
