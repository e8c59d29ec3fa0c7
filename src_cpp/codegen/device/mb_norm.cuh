// Row-wise normalization kernels (softmax, log_softmax, layer norm, RMS
// norm; forward and backward) over the last dim of a [rows, cols] view whose
// rows are contiguous. One block per row, grid-stride over rows; statistics
// accumulate in A = Compute<T>::type (fp32 for fp16/bf16/fp32, fp64 for
// fp64). The row is read twice (statistics, then output) rather than held
// in shared memory, because cols is a run-time argument; the second read
// usually hits L2.
#pragma once

#include "mb_math.cuh"
#include "mb_reduce.cuh"
#include "mb_reduction.cuh"
#include "mb_vector_io.cuh"

namespace mb {

template <int N>
struct Int {
  static constexpr int value = N;
};

// Calls f(col, Int<N>()) for each chunk of this thread's columns: N == VEC
// when the row length allows 16-byte accesses, else N == 1.
template <int VEC, class I, class F>
__device__ __forceinline__ void row_loop(I cols, F&& f) {
  if constexpr (VEC > 1) {
    if (cols % VEC == 0) {
      for (I c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) f(c, Int<VEC>());
      return;
    }
  }
  for (I c = threadIdx.x; c < cols; c += blockDim.x) f(c, Int<1>());
}

// Loads N weights as A, or ones when the norm has no weight.
template <bool HAS, int N, class W, class A>
__device__ __forceinline__ void load_param(const W* __restrict__ p, A (&out)[N], A fallback) {
  if constexpr (HAS) {
    typename Compute<W>::type raw[N];
    load_compute<N>(p, raw);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = static_cast<A>(raw[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fallback;
  }
}

template <int N, class T, class A>
__device__ __forceinline__ void load_as(const T* __restrict__ p, A (&out)[N]) {
  typename Compute<T>::type raw[N];
  load_compute<N>(p, raw);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = static_cast<A>(raw[k]);
}

// ---- softmax / log_softmax ------------------------------------------------

template <class A>
struct MaxSum {
  A max;
  A sum;  // sum of exp(x - max)
};

// Online softmax statistics (one read of the row for max and sum).
template <class A>
struct SoftmaxReducer {
  typedef MaxSum<A> AccT;
  __device__ static AccT identity() { return AccT{Limits<A>::lowest(), A(0)}; }
  __device__ static AccT combine(AccT a, AccT b) {
    const A m = a.max > b.max ? a.max : b.max;
    if (m == Limits<A>::lowest()) return AccT{m, a.sum + b.sum};
    return AccT{m, a.sum * mb::exp(a.max - m) + b.sum * mb::exp(b.max - m)};
  }
  __device__ static AccT shfl(AccT a, int m) {
    return AccT{shfl_xor(a.max, m), shfl_xor(a.sum, m)};
  }
  // One element: a single exp in the common case. An element equal to a
  // -inf running max adds 1 like combine() does; NaN poisons the sum.
  __device__ static void add(AccT& s, A x) {
    if (x > s.max) {
      s.sum = s.sum * mb::exp(s.max - x) + A(1);
      s.max = x;
    } else if (x == s.max && x == Limits<A>::lowest()) {
      s.sum += A(1);
    } else {
      s.sum += mb::exp(x - s.max);
    }
  }
};

template <class T, class TO, class I, int VEC, bool LOG>
__device__ __forceinline__ void softmax_forward(const T* __restrict__ x, TO* __restrict__ y, I rows,
                                                I cols) {
  typedef typename Compute<T>::type A;
  typedef SoftmaxReducer<A> R;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    TO* yr = y + row * cols;
    typename R::AccT s = R::identity();
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      load_as<N>(xr + c, v);
#pragma unroll
      for (int k = 0; k < N; ++k) R::add(s, v[k]);
    });
    s = block_reduce<R>(s);
    const A log_sum = mb::log(s.sum);
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      load_as<N>(xr + c, v);
#pragma unroll
      for (int k = 0; k < N; ++k)
        v[k] = LOG ? v[k] - s.max - log_sum : mb::exp(v[k] - s.max) / s.sum;
      store_compute<N>(yr + c, v);
    });
  }
}

// softmax:     gx = y * (gy - sum(gy * y))
// log_softmax: gx = gy - exp(y) * sum(gy)
template <class T, class I, int VEC, bool LOG>
__device__ __forceinline__ void softmax_backward(const T* __restrict__ gy, const T* __restrict__ y,
                                                 T* __restrict__ gx, I rows, I cols) {
  typedef typename Compute<T>::type A;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I base = row * cols;
    A sum = A(0);
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A g[N], o[N];
      load_as<N>(gy + base + c, g);
      load_as<N>(y + base + c, o);
#pragma unroll
      for (int k = 0; k < N; ++k) sum += LOG ? g[k] : g[k] * o[k];
    });
    sum = block_reduce<SumReducer<A> >(sum);
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A g[N], o[N];
      load_as<N>(gy + base + c, g);
      load_as<N>(y + base + c, o);
#pragma unroll
      for (int k = 0; k < N; ++k) g[k] = LOG ? g[k] - mb::exp(o[k]) * sum : o[k] * (g[k] - sum);
      store_compute<N>(gx + base + c, g);
    });
  }
}

// ---- layer norm / RMS norm ------------------------------------------------

template <class A>
struct Pair {
  A a;
  A b;
};

template <class A>
struct PairSumReducer {
  typedef Pair<A> AccT;
  __device__ static AccT identity() { return AccT{A(0), A(0)}; }
  template <class I>
  __device__ static AccT make(AccT v, I) {
    return v;
  }
  __device__ static AccT combine(AccT x, AccT y) { return AccT{x.a + y.a, x.b + y.b}; }
  __device__ static AccT shfl(AccT v, int m) { return AccT{shfl_xor(v.a, m), shfl_xor(v.b, m)}; }
};

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var biased.
// RMS (RMS == true): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <class T, class W, class I, int VEC, bool RMS, bool HAS_W, bool HAS_B, bool SAVE>
__device__ __forceinline__ void norm_forward(const T* __restrict__ x, const W* __restrict__ w,
                                             const W* __restrict__ b, T* __restrict__ y,
                                             typename Compute<T>::type* __restrict__ mean_out,
                                             typename Compute<T>::type* __restrict__ rstd_out,
                                             I rows, I cols, double eps) {
  typedef typename Compute<T>::type A;
  typedef WelfordReducer<A> R;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I base = row * cols;
    typename R::AccT acc = R::identity();
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      load_as<N>(x + base + c, v);
#pragma unroll
      for (int k = 0; k < N; ++k) acc = R::combine(acc, R::make(RMS ? v[k] * v[k] : v[k], 0));
    });
    acc = block_reduce<R>(acc);
    // For RMS the Welford mean of x^2 is the mean square.
    const A mean = RMS ? A(0) : acc.mean;
    const A var = RMS ? acc.mean : acc.m2 / static_cast<A>(cols);
    const A rstd = mb::rsqrt(var + static_cast<A>(eps));
    if (SAVE && threadIdx.x == 0) {
      if (!RMS) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N], wv[N], bv[N];
      load_as<N>(x + base + c, v);
      load_param<HAS_W, N>(w + c, wv, A(1));
      load_param<HAS_B, N>(b + c, bv, A(0));
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = (v[k] - mean) * rstd * wv[k] + bv[k];
      store_compute<N>(y + base + c, v);
    });
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w,
// xhat = (x - mean) * rstd; RMS drops the mean(g) term and has mean = 0.
template <class T, class W, class I, int VEC, bool RMS, bool HAS_W>
__device__ __forceinline__ void norm_backward_input(
    const T* __restrict__ gy, const T* __restrict__ x,
    const typename Compute<T>::type* __restrict__ mean,
    const typename Compute<T>::type* __restrict__ rstd, const W* __restrict__ w, T* __restrict__ gx,
    I rows, I cols) {
  typedef typename Compute<T>::type A;
  typedef PairSumReducer<A> R;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I base = row * cols;
    const A mu = RMS ? A(0) : mean[row];
    const A r = rstd[row];
    typename R::AccT sums = R::identity();
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A g[N], v[N], wv[N];
      load_as<N>(gy + base + c, g);
      load_as<N>(x + base + c, v);
      load_param<HAS_W, N>(w + c, wv, A(1));
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const A wg = g[k] * wv[k];
        sums.a += wg;
        sums.b += wg * (v[k] - mu) * r;
      }
    });
    sums = block_reduce<R>(sums);
    const A inv_cols = A(1) / static_cast<A>(cols);
    const A mean_g = RMS ? A(0) : sums.a * inv_cols;
    const A mean_gx = sums.b * inv_cols;
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A g[N], v[N], wv[N];
      load_as<N>(gy + base + c, g);
      load_as<N>(x + base + c, v);
      load_param<HAS_W, N>(w + c, wv, A(1));
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const A xhat = (v[k] - mu) * r;
        g[k] = r * (g[k] * wv[k] - mean_g - xhat * mean_gx);
      }
      store_compute<N>(gx + base + c, g);
    });
  }
}

// Per element of [rows, cols]: (gy * xhat, gy), summed over rows below.
template <class T, class I, bool RMS>
struct NormParamGradLoad {
  typedef Pair<typename Compute<T>::type> Value;
  const T* __restrict__ gy;
  const T* __restrict__ x;
  const typename Compute<T>::type* __restrict__ mean;
  const typename Compute<T>::type* __restrict__ rstd;
  I cols;
  __device__ Value operator()(I linear) const {
    typedef typename Compute<T>::type A;
    const I row = linear / cols;
    const A g = static_cast<A>(to_compute(gy[linear]));
    const A xhat = (static_cast<A>(to_compute(x[linear])) - (RMS ? A(0) : mean[row])) * rstd[row];
    return Value{g * xhat, g};
  }
};

template <class W, class A, bool HAS_W, bool HAS_B>
struct NormParamGradStore {
  W* __restrict__ dw;
  W* __restrict__ db;
  template <class I>
  __device__ void operator()(I col, Pair<A> sums, I) const {
    if (HAS_W) dw[col] = from_compute<W>(sums.a);
    if (HAS_B) db[col] = from_compute<W>(sums.b);
  }
};

// dw = sum over rows of gy * xhat, db = sum over rows of gy: a column
// reduction of [rows, cols] (block 32 x 8).
template <class T, class W, class I, bool RMS, bool HAS_W, bool HAS_B>
__device__ __forceinline__ void norm_backward_params(
    const T* __restrict__ gy, const T* __restrict__ x,
    const typename Compute<T>::type* __restrict__ mean,
    const typename Compute<T>::type* __restrict__ rstd, W* __restrict__ dw, W* __restrict__ db,
    I rows, I cols) {
  typedef typename Compute<T>::type A;
  const NormParamGradLoad<T, I, RMS> load{gy, x, mean, rstd, cols};
  const NormParamGradStore<W, A, HAS_W, HAS_B> store{dw, db};
  reduce_outer<PairSumReducer<A> >(load, store, I(1), rows, cols);
}

}  // namespace mb
