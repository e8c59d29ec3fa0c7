// Scalar types, conversions and index helpers shared by every generated
// kernel.
//
// Note [No toolkit headers]
// NVRTC compiles these headers with nothing but its built-ins: no <cstdint>,
// no cuda_fp16.h. The toolkit's include directory is not guaranteed to exist
// where the backend runs (a pip-installed torch brings libnvrtc but not the
// CUDA headers), so fp16/bf16 are small storage structs here, converted with
// the same PTX instructions cuda_fp16.h uses. See docs/design/0003-codegen.md.
#pragma once

namespace mb {

typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Storage-only 16-bit floats: kernels widen to float at load and narrow at
// store (math in fp32, like eager's opmath).
struct __align__(2) f16 {
  unsigned short bits;
};
struct __align__(2) bf16 {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}

__device__ __forceinline__ f16 to_f16(float f) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// bf16 is the top half of a float, so widening is a shift.
__device__ __forceinline__ float to_float(bf16 b) {
  return __uint_as_float(static_cast<unsigned>(b.bits) << 16);
}

// Round to nearest even, NaN kept quiet: what c10::BFloat16 does. sm_80 and
// later have the instruction; older targets use integer operations (the
// instruction's NaN is the canonical 0x7fff, c10 keeps sign and payload:
// both are NaN).
__device__ __forceinline__ bf16 to_bf16(float f) {
  bf16 b;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
  return b;
#else
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);
    return b;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  b.bits = static_cast<unsigned short>(u >> 16);
  return b;
#endif
}

// Rounding a float held value to the precision of a narrower type; used for
// explicit casts to fp16/bf16, which keep the value in a float register.
__device__ __forceinline__ float round_f16(float f) { return to_float(to_f16(f)); }
__device__ __forceinline__ float round_bf16(float f) { return to_float(to_bf16(f)); }

// Compute<T>::type is the register type of a value stored as T.
template <class T>
struct Compute {
  typedef T type;
};
template <>
struct Compute<f16> {
  typedef float type;
};
template <>
struct Compute<bf16> {
  typedef float type;
};

template <class T>
__device__ __forceinline__ T to_compute(T v) {
  return v;
}
__device__ __forceinline__ float to_compute(f16 v) { return to_float(v); }
__device__ __forceinline__ float to_compute(bf16 v) { return to_float(v); }

// from_compute<T>(v): the storage value of register value v. A double held
// value narrows to fp16/bf16 through float, as c10::Half(double) does.
template <class T>
struct Narrow {
  template <class C>
  __device__ static T from(C v) {
    return static_cast<T>(v);
  }
};
template <>
struct Narrow<f16> {
  template <class C>
  __device__ static f16 from(C v) {
    return to_f16(static_cast<float>(v));
  }
};
template <>
struct Narrow<bf16> {
  template <class C>
  __device__ static bf16 from(C v) {
    return to_bf16(static_cast<float>(v));
  }
};
template <class T, class C>
__device__ __forceinline__ T from_compute(C v) {
  return Narrow<T>::from(v);
}

__device__ __forceinline__ float inf_f32() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double inf_f64() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double nan_f64() { return __longlong_as_double(0x7ff8000000000000LL); }

template <class T>
struct Limits {
  __device__ static T lowest();
  __device__ static T highest();
};
template <>
struct Limits<float> {
  __device__ static float lowest() { return -inf_f32(); }
  __device__ static float highest() { return inf_f32(); }
};
template <>
struct Limits<double> {
  __device__ static double lowest() { return -inf_f64(); }
  __device__ static double highest() { return inf_f64(); }
};
template <>
struct Limits<long long> {
  __device__ static long long lowest() { return -9223372036854775807LL - 1; }
  __device__ static long long highest() { return 9223372036854775807LL; }
};
template <>
struct Limits<unsigned long long> {
  __device__ static unsigned long long lowest() { return 0ULL; }
  __device__ static unsigned long long highest() { return ~0ULL; }
};

// Sizes or strides of a tensor of rank R, passed by value as a kernel
// argument. Always 64-bit in the ABI; kernels narrow to their index type.
template <int R>
struct Dims {
  long long d[R];
};

// floor(n / d) for 0 <= n < 2^31, from d's packed multiplier and shift
// (Note [Divisors as multipliers] in runtime/fast_divisors.h).
__device__ __forceinline__ int fast_div(int n, long long packed) {
  const unsigned m = static_cast<unsigned>(static_cast<unsigned long long>(packed) >> 32);
  const unsigned s = static_cast<unsigned>(packed) & 31u;
  const unsigned u = static_cast<unsigned>(n);
  return static_cast<int>((__umulhi(u, m) + u) >> s);
}

}  // namespace mb
