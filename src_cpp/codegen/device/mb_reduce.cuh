// Reducers and warp/block reduction, shared by the reduction and norm
// kernels. A reducer R names its accumulator type R::Acc and provides
// identity(), make(value, index) (one element into an accumulator), combine()
// and shfl_xor(); combine must be associative, and reductions here always
// combine in the same order for a given block shape, so results are
// deterministic run to run.
#pragma once

#include "mb_math.cuh"
#include "mb_types.cuh"

namespace mb {

// An enumerator: under -default-device a namespace-scope constexpr variable
// becomes a __device__ global.
enum : unsigned { kFullMask = 0xffffffffu };

template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(kFullMask, v, lane_mask);
}

template <class Acc>
struct SumReducer {
  typedef Acc AccT;
  __device__ static Acc identity() { return Acc(0); }
  template <class V, class I>
  __device__ static Acc make(V v, I) {
    return static_cast<Acc>(v);
  }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Acc shfl(Acc a, int m) { return shfl_xor(a, m); }
};

template <class Acc>
struct ProdReducer {
  typedef Acc AccT;
  __device__ static Acc identity() { return Acc(1); }
  template <class V, class I>
  __device__ static Acc make(V v, I) {
    return static_cast<Acc>(v);
  }
  __device__ static Acc combine(Acc a, Acc b) { return a * b; }
  __device__ static Acc shfl(Acc a, int m) { return shfl_xor(a, m); }
};

// amax/amin propagate NaN, like torch.
template <class Acc>
struct MaxReducer {
  typedef Acc AccT;
  __device__ static Acc identity() { return Limits<Acc>::lowest(); }
  template <class V, class I>
  __device__ static Acc make(V v, I) {
    return static_cast<Acc>(v);
  }
  __device__ static Acc combine(Acc a, Acc b) { return maximum(a, b); }
  __device__ static Acc shfl(Acc a, int m) { return shfl_xor(a, m); }
};

template <class Acc>
struct MinReducer {
  typedef Acc AccT;
  __device__ static Acc identity() { return Limits<Acc>::highest(); }
  template <class V, class I>
  __device__ static Acc make(V v, I) {
    return static_cast<Acc>(v);
  }
  __device__ static Acc combine(Acc a, Acc b) { return minimum(a, b); }
  __device__ static Acc shfl(Acc a, int m) { return shfl_xor(a, m); }
};

// Welford's running mean and sum of squared deviations: one pass, no
// catastrophic cancellation (var = m2 / (n - correction)).
template <class F>
struct Welford {
  F mean;
  F m2;
  F n;
};

template <class F>
struct WelfordReducer {
  typedef Welford<F> AccT;
  __device__ static AccT identity() { return AccT{F(0), F(0), F(0)}; }
  template <class V, class I>
  __device__ static AccT make(V v, I) {
    return AccT{static_cast<F>(v), F(0), F(1)};
  }
  __device__ static AccT combine(AccT a, AccT b) {
    const F n = a.n + b.n;
    if (n == F(0)) return a;
    const F delta = b.mean - a.mean;
    const F b_share = b.n / n;
    return AccT{a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * a.n * b_share, n};
  }
  __device__ static AccT shfl(AccT a, int m) {
    return AccT{shfl_xor(a.mean, m), shfl_xor(a.m2, m), shfl_xor(a.n, m)};
  }
};

template <class F>
struct ArgPair {
  F value;
  long long index;
};

// argmax/argmin as torch: NaN counts as the extreme, ties go to the lower
// index. The empty accumulator has index -1 and loses to everything.
template <class F, bool kMax>
struct ArgReducer {
  typedef ArgPair<F> AccT;
  __device__ static AccT identity() { return AccT{F(0), -1}; }
  template <class V, class I>
  __device__ static AccT make(V v, I index) {
    return AccT{static_cast<F>(v), static_cast<long long>(index)};
  }
  __device__ static bool first_wins(const AccT& a, const AccT& b) {
    if (b.index < 0) return true;
    if (a.index < 0) return false;
    const bool a_nan = is_nan(a.value);
    const bool b_nan = is_nan(b.value);
    if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index);
    if (a.value == b.value) return a.index < b.index;
    return kMax ? a.value > b.value : a.value < b.value;
  }
  __device__ static AccT combine(AccT a, AccT b) { return first_wins(a, b) ? a : b; }
  __device__ static AccT shfl(AccT a, int m) {
    return AccT{shfl_xor(a.value, m), shfl_xor(a.index, m)};
  }
};

template <class R>
__device__ __forceinline__ typename R::AccT warp_reduce(typename R::AccT v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = R::combine(v, R::shfl(v, m));
  return v;
}

// Reduces over every thread of the block (any shape whose size is a
// multiple of 32) and returns the result to all threads. Ends with a
// barrier, so it may be called again right away.
template <class R>
__device__ __forceinline__ typename R::AccT block_reduce(typename R::AccT v) {
  typedef typename R::AccT Acc;
  __shared__ Acc partial[32];
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int warps = (blockDim.x * blockDim.y * blockDim.z) / 32;
  v = warp_reduce<R>(v);
  if (tid % 32 == 0) partial[tid / 32] = v;
  __syncthreads();
  if (tid < 32) {
    Acc w = tid < warps ? partial[tid] : R::identity();
    w = warp_reduce<R>(w);
    if (tid == 0) partial[0] = w;
  }
  __syncthreads();
  const Acc result = partial[0];
  __syncthreads();
  return result;
}

}  // namespace mb
