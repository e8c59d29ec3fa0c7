// Cross-entropy over class logits, forward and backward (Note [Fused
// cross-entropy] in mybackend/ops/cross_entropy.py): `rows` rows of `cols`
// logits, rows `row_stride` elements apart (a padded output layer leaves
// rows wider than cols), one class index per row. Math in fp32 whatever the
// logits' dtype, as autocast's fp32 cross-entropy does.
//
// Note [Rows of any alignment]
// Rows start wherever the row stride puts them: 50257 bf16 logits per row
// leave most rows off a 16-byte boundary, which sent the norm kernels' loop
// path to scalar loads. Here each row is cut into a scalar head up to its
// first 16-byte boundary, a body of 16-byte vectors and a scalar tail, so
// the body is vectorized for any stride. The backward writes contiguous
// rows: its vectors follow the output's boundaries, and the logits are read
// as vectors too when both rows are cut at the same place.
#pragma once

#include "mb_norm.cuh"

namespace mb {

// Elements of `p` before its first multiple of VEC elements' bytes, at most n.
template <int VEC, class T, class I>
__device__ __forceinline__ I head_elements(const T* p, I n) {
  enum : unsigned long long { kBytes = VEC * sizeof(T) };
  const unsigned long long off = reinterpret_cast<unsigned long long>(p) % kBytes;
  const I head = off == 0 ? I(0) : static_cast<I>((kBytes - off) / sizeof(T));
  return head < n ? head : n;
}

// Vectors per thread loaded before any is used: enough loads in flight to
// cover memory latency with a few blocks per SM.
enum : int { kCrossEntropyUnroll = 4 };

// Per row: lse = log(sum(exp(x))) (online, one read), and
// loss = lse - x[target], 0 where target == ignore_index, NaN where the
// target is out of range (eager's kernel traps there instead).
template <class T, class I, int VEC>
__device__ __forceinline__ void cross_entropy_forward(const T* __restrict__ x,
                                                      const long long* __restrict__ target,
                                                      float* __restrict__ loss,
                                                      float* __restrict__ lse, I rows, I cols,
                                                      I row_stride, long long ignore_index) {
  typedef SoftmaxReducer<float> R;
  enum : int { U = kCrossEntropyUnroll };
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * row_stride;
    typename R::AccT s = R::identity();
    const I head = head_elements<VEC>(xr, cols);
    const I body_end = head + (cols - head) / VEC * VEC;
    const I step = static_cast<I>(blockDim.x) * VEC;
    for (I c = threadIdx.x; c < head; c += blockDim.x) R::add(s, to_compute(xr[c]));
    I c = head + static_cast<I>(threadIdx.x) * VEC;
    for (; c + (U - 1) * step < body_end; c += U * step) {
      float v[U][VEC];
#pragma unroll
      for (int u = 0; u < U; ++u) load_as<VEC>(xr + c + u * step, v[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) R::add(s, v[u][e]);
      }
    }
    for (; c < body_end; c += step) {
      float v[VEC];
      load_as<VEC>(xr + c, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) R::add(s, v[e]);
    }
    for (I t = body_end + threadIdx.x; t < cols; t += blockDim.x) R::add(s, to_compute(xr[t]));
    s = block_reduce<R>(s);
    if (threadIdx.x == 0) {
      const float l = s.max + mb::log(s.sum);
      lse[row] = l;
      const long long t = target[row];
      float value = 0.0f;
      if (t != ignore_index) value = (t >= 0 && t < cols) ? l - to_compute(xr[t]) : nan_f32();
      loss[row] = value;
    }
  }
}

// grad_in = grad_loss * (exp(x - lse) - onehot(target)) per row; zero rows
// where target == ignore_index. grad_in's rows are out_row_stride >= cols
// elements apart, the columns past cols zero (Note [Padded cross-entropy
// gradient] in mybackend/ops/cross_entropy.py).
template <class T, class I, int VEC>
__device__ __forceinline__ void cross_entropy_backward(
    const float* __restrict__ grad_loss, const T* __restrict__ x,
    const long long* __restrict__ target, const float* __restrict__ lse, T* __restrict__ grad_in,
    I rows, I cols, I row_stride, I out_row_stride, long long ignore_index) {
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * row_stride;
    T* gr = grad_in + row * out_row_stride;
    for (I c = cols + threadIdx.x; c < out_row_stride; c += blockDim.x)
      gr[c] = from_compute<T>(0.f);
    const long long t = target[row];
    const bool ignored = t == ignore_index;
    const float g = ignored ? 0.0f : grad_loss[row];
    const float l = lse[row];
    auto grad = [&](float v, I col) {
      return ignored ? 0.0f : g * (mb::exp(v - l) - (col == t ? 1.0f : 0.0f));
    };
    const I head = head_elements<VEC>(gr, cols);
    const bool same_cut = head_elements<VEC>(xr, cols) == head;
    const I body_end = head + (cols - head) / VEC * VEC;
    const I step = static_cast<I>(blockDim.x) * VEC;
    for (I c = threadIdx.x; c < head; c += blockDim.x)
      gr[c] = from_compute<T>(grad(to_compute(xr[c]), c));
    for (I c = head + static_cast<I>(threadIdx.x) * VEC; c < body_end; c += step) {
      float v[VEC];
      if (same_cut) {
        load_as<VEC>(xr + c, v);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = to_compute(xr[c + e]);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = grad(v[e], c + e);
      store_compute<VEC>(gr + c, v);
    }
    for (I c = body_end + threadIdx.x; c < cols; c += blockDim.x)
      gr[c] = from_compute<T>(grad(to_compute(xr[c]), c));
  }
}

}  // namespace mb
