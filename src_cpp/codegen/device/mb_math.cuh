// Scalar math for generated pointwise code, overloaded for the compute
// types (float, double, the integer types). Formulas follow ATen's CUDA
// kernels so that fused results match eager (NaN propagation in max/min and
// clamp, Python-style floor division and remainder, torch's gelu forms).
// IEEE by default (see Note [No fast math] in docs/design/0003-codegen.md);
// MB_APPROX_MATH, defined by the emitter before this header, relaxes the
// float forms of a few functions when every stored result is 16-bit (Note
// [Approximate math for 16-bit results]).
#pragma once

#include "mb_types.cuh"

// Note [Approximate math for 16-bit results]
// 1: every tensor the kernel stores is fp16 or bf16. exp is __expf (MUFU
//    ex2, error 2 + 1.2|x| fp32 ulps) and the reciprocals inside sigmoid and
//    silu are __fdividef (2 ulps): both far below fp16's 2^-11 rounding.
// 2: every stored tensor is bf16 (2^-8 rounding): tanh is tanh.approx.f32
//    (relative error below 2^-10.9), which fp16 results could notice.
// fp32/fp64 results always get the IEEE forms; so do explicit divisions,
// except smooth ones (smooth_div below).
#ifndef MB_APPROX_MATH
#define MB_APPROX_MATH 0
#endif

namespace mb {

#define MB_FLOAT_UNARY(name, ffn, dfn)                                \
  __device__ __forceinline__ float name(float x) { return ::ffn(x); } \
  __device__ __forceinline__ double name(double x) { return ::dfn(x); }

MB_FLOAT_UNARY(exp2, exp2f, exp2)
MB_FLOAT_UNARY(expm1, expm1f, expm1)
MB_FLOAT_UNARY(log, logf, log)
MB_FLOAT_UNARY(log1p, log1pf, log1p)
MB_FLOAT_UNARY(log2, log2f, log2)
MB_FLOAT_UNARY(sqrt, sqrtf, sqrt)
MB_FLOAT_UNARY(rsqrt, rsqrtf, rsqrt)
MB_FLOAT_UNARY(sin, sinf, sin)
MB_FLOAT_UNARY(cos, cosf, cos)
MB_FLOAT_UNARY(tan, tanf, tan)
MB_FLOAT_UNARY(erf, erff, erf)
MB_FLOAT_UNARY(floor, floorf, floor)
MB_FLOAT_UNARY(ceil, ceilf, ceil)
MB_FLOAT_UNARY(trunc, truncf, trunc)
// torch.round rounds half to even, which is rint in the default mode.
MB_FLOAT_UNARY(round, rintf, rint)
#undef MB_FLOAT_UNARY

__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ float exp(float x) {
#if MB_APPROX_MATH >= 1
  return ::__expf(x);
#else
  return ::expf(x);
#endif
}
__device__ __forceinline__ float tanh(float x) {
#if MB_APPROX_MATH >= 2 && __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return ::tanhf(x);
#endif
}

// a / b, in the fast form where MB_APPROX_MATH allows it. Only for
// divisors >= 1 (sigmoid, silu): __fdividef's zero for divisors beyond
// 2^126 is then the right limit.
template <class F>
__device__ __forceinline__ F activation_div(F a, F b) {
  return a / b;
}
#if MB_APPROX_MATH >= 1
template <>
__device__ __forceinline__ float activation_div<float>(float a, float b) {
  return ::__fdividef(a, b);
}
#endif

// a / b where only continuous ops read the quotient before a store (the
// emitter decides: Note [Smooth divisions] in codegen/emit_common.cpp); with
// MB_APPROX_MATH >= 1, PTX div.full.f32 (2 ulps, full range).
template <class F>
__device__ __forceinline__ F smooth_div(F a, F b) {
  return a / b;
}
#if MB_APPROX_MATH >= 1
template <>
__device__ __forceinline__ float smooth_div<float>(float a, float b) {
  float q;
  asm("div.full.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
}
#endif

// floor/ceil/round/trunc of an integer are the integer itself.
template <class T>
__device__ __forceinline__ T floor(T x) {
  return x;
}
template <class T>
__device__ __forceinline__ T ceil(T x) {
  return x;
}
template <class T>
__device__ __forceinline__ T round(T x) {
  return x;
}
template <class T>
__device__ __forceinline__ T trunc(T x) {
  return x;
}

// x < 0 without the "pointless comparison" warning for unsigned types.
template <class T>
__device__ __forceinline__ bool is_negative(T x) {
  if constexpr (static_cast<T>(-1) < static_cast<T>(0)) {
    return x < static_cast<T>(0);
  } else {
    return false;
  }
}

template <class T>
__device__ __forceinline__ bool is_nan(T x) {
  return x != x;
}
template <class T>
__device__ __forceinline__ bool is_inf(T) {
  return false;
}
__device__ __forceinline__ bool is_inf(float x) { return ::fabsf(x) == inf_f32(); }
__device__ __forceinline__ bool is_inf(double x) { return ::fabs(x) == inf_f64(); }

template <class T>
__device__ __forceinline__ T abs(T x) {
  return static_cast<T>(is_negative(x) ? -x : x);
}
__device__ __forceinline__ float abs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double abs(double x) { return ::fabs(x); }

template <class T>
__device__ __forceinline__ T sign(T x) {
  return static_cast<T>((T(0) < x) - is_negative(x));
}

// NaN wins, as in torch.maximum / torch.minimum (fmax would drop it).
template <class T>
__device__ __forceinline__ T maximum(T a, T b) {
  return (is_nan(a) || a > b) ? a : b;
}
template <class T>
__device__ __forceinline__ T minimum(T a, T b) {
  return (is_nan(a) || a < b) ? a : b;
}
template <class T>
__device__ __forceinline__ T clamp(T x, T lo, T hi) {
  return minimum(maximum(x, lo), hi);
}
template <class T>
__device__ __forceinline__ T relu(T x) {
  return maximum(x, T(0));
}

__device__ __forceinline__ float fmod(float a, float b) { return ::fmodf(a, b); }
__device__ __forceinline__ double fmod(double a, double b) { return ::fmod(a, b); }
template <class T>
__device__ __forceinline__ T fmod(T a, T b) {
  return static_cast<T>(a % b);
}

// Python's %: the result takes the sign of the divisor.
template <class T>
__device__ __forceinline__ T remainder(T a, T b) {
  T m = mb::fmod(a, b);
  if (m != T(0) && (is_negative(b) != is_negative(m))) m = static_cast<T>(m + b);
  return m;
}

template <class T>
__device__ __forceinline__ T div_trunc(T a, T b) {
  return static_cast<T>(a / b);
}
__device__ __forceinline__ float div_trunc(float a, float b) { return ::truncf(a / b); }
__device__ __forceinline__ double div_trunc(double a, double b) { return ::trunc(a / b); }

template <class T>
__device__ __forceinline__ T div_floor(T a, T b) {
  T q = static_cast<T>(a / b);
  if ((a % b != 0) && (is_negative(a) != is_negative(b))) q = static_cast<T>(q - 1);
  return q;
}

// ATen's div_floor_floating: exact for large quotients where floor(a / b)
// would round the quotient first.
template <class F>
__device__ __forceinline__ F div_floor_float(F a, F b) {
  if (b == F(0)) return a / b;
  F m = mb::fmod(a, b);
  F div = (a - m) / b;
  if (m != F(0) && ((b < F(0)) != (m < F(0)))) div -= F(1);
  if (div == F(0)) return ::copysign(F(0), a / b);
  F fl = mb::floor(div);
  if (div - fl > F(0.5)) fl += F(1);
  return fl;
}
__device__ __forceinline__ float div_floor(float a, float b) { return div_floor_float(a, b); }
__device__ __forceinline__ double div_floor(double a, double b) { return div_floor_float(a, b); }

__device__ __forceinline__ float pow(float a, float b) { return ::powf(a, b); }
__device__ __forceinline__ double pow(double a, double b) { return ::pow(a, b); }
// Integer power by squaring; negative exponents as ATen's powi.
template <class T>
__device__ __forceinline__ T pow(T base, T e) {
  if (is_negative(e)) {
    if (base == T(1)) return T(1);
    if (base == static_cast<T>(-1)) return static_cast<T>((-e) % 2 ? -1 : 1);
    return T(0);
  }
  T result = T(1);
  while (e) {
    if (e & 1) result = static_cast<T>(result * base);
    e = static_cast<T>(e / 2);
    base = static_cast<T>(base * base);
  }
  return result;
}

// Shifts as ATen defines them: out-of-range shift counts saturate instead of
// being undefined.
template <class T>
__device__ __forceinline__ T shl(T a, T b) {
  const T bits = static_cast<T>(sizeof(T) * 8);
  if (is_negative(b) || b >= bits) return T(0);
  return static_cast<T>(static_cast<unsigned long long>(a) << b);
}
template <class T>
__device__ __forceinline__ T shr(T a, T b) {
  const T bits = static_cast<T>(sizeof(T) * 8);
  if (is_negative(b) || b >= bits) return static_cast<T>(is_negative(a) ? -1 : 0);
  return static_cast<T>(a >> b);
}

template <class F>
__device__ __forceinline__ F reciprocal(F x) {
  return F(1) / x;
}
template <class F>
__device__ __forceinline__ F sigmoid(F x) {
  return activation_div(F(1), F(1) + mb::exp(-x));
}
template <class F>
__device__ __forceinline__ F silu(F x) {
  return activation_div(x, F(1) + mb::exp(-x));
}

template <class F>
__device__ __forceinline__ F gelu_erf(F x) {
  const F kAlpha = F(0.70710678118654752440);  // 1/sqrt(2)
  return x * F(0.5) * (F(1) + mb::erf(x * kAlpha));
}
template <class F>
__device__ __forceinline__ F gelu_tanh(F x) {
  const F kBeta = F(0.79788456080286535588);  // sqrt(2/pi)
  const F kKappa = F(0.044715);
  const F inner = kBeta * (x + kKappa * x * x * x);
  return F(0.5) * x * (F(1) + mb::tanh(inner));
}

// lerp as ATen computes it: the weight picks the formula with less error.
template <class F>
__device__ __forceinline__ F lerp(F a, F b, F w) {
  return mb::abs(w) < F(0.5) ? a + w * (b - a) : b - (b - a) * (F(1) - w);
}

// ---- backward forms (dy: incoming gradient) ---------------------------
template <class T>
__device__ __forceinline__ T threshold_backward(T dy, T x, T threshold) {
  return x <= threshold ? T(0) : dy;
}
template <class T>
__device__ __forceinline__ T relu_backward(T dy, T y) {
  return y <= T(0) ? T(0) : dy;
}
template <class F>
__device__ __forceinline__ F sigmoid_backward(F dy, F y) {
  return dy * (F(1) - y) * y;
}
template <class F>
__device__ __forceinline__ F tanh_backward(F dy, F y) {
  return dy * (F(1) - y * y);
}
template <class F>
__device__ __forceinline__ F silu_backward(F dy, F x) {
  const F s = sigmoid(x);
  return dy * s * (F(1) + x * (F(1) - s));
}
template <class F>
__device__ __forceinline__ F gelu_erf_backward(F dy, F x) {
  const F kAlpha = F(0.70710678118654752440);  // 1/sqrt(2)
  const F kBeta = F(0.39894228040143267794);   // 1/sqrt(2*pi)
  const F cdf = F(0.5) * (F(1) + mb::erf(x * kAlpha));
  const F pdf = kBeta * mb::exp(F(-0.5) * x * x);
  return dy * (cdf + x * pdf);
}
template <class F>
__device__ __forceinline__ F gelu_tanh_backward(F dy, F x) {
  const F kBeta = F(0.79788456080286535588);  // sqrt(2/pi)
  const F kKappa = F(0.044715);
  const F x_sq = x * x;
  const F inner = kBeta * (x + kKappa * x_sq * x);
  const F t = mb::tanh(inner);
  const F left = F(0.5) * x;
  const F right = F(1) + t;
  const F left_derivative = F(0.5) * right;
  const F inner_derivative = kBeta * (F(1) + F(3) * kKappa * x_sq);
  const F right_derivative = left * (F(1) - t * t) * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

}  // namespace mb
