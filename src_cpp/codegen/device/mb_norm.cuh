// Row-wise normalization kernels (softmax, log_softmax, layer norm, RMS
// norm; forward and backward) over the last dim of a [rows, cols] view whose
// rows are contiguous; statistics accumulate in A = Compute<T>::type (fp32
// for fp16/bf16/fp32, fp64 for fp64).
//
// Note [Rows in registers]
// Forward kernels and the backward layer and RMS norms' grad_in first try
// the register path: a row is split over `tpr`
// threads (the smallest power of two, at most the block, whose CHUNKS
// vectors of VEC elements each cover it), read once into registers, reduced
// within its thread group (shuffles; shared memory only when tpr > 32) and
// written once; blockDim.x / tpr rows per block. cols is a run-time
// argument, so the kernel picks tpr itself (row_threads) and the launcher
// repeats the computation only to size the grid. Rows that do not fit, or
// too long for it take the loop path: a block per row, read twice
// (statistics, then output; the second read usually hits L2).
//
// Note [Scalar rows in registers]
// A row whose length is not a multiple of VEC (a 7x7 window's 49 scores,
// ViT's 197 tokens) takes the register path with scalars: CHUNKS elements a
// thread. It once took the loop path, a 128-thread block for 49 elements
// with two block-wide reductions: Swin-T's window softmax ran at 180 us a
// call on an H200, a tenth of DRAM bandwidth. with_register_path picks the
// width; the launcher's norm_row_threads mirrors it.
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

// Threads per row of the register path for rows of `cols` elements, or 0
// when the row does not fit (or is not made of whole vectors): the same
// formula as the launcher's (norm_kernel.cpp).
template <int VEC, int CHUNKS>
__device__ __forceinline__ int row_threads(long long cols) {
  if (cols % VEC != 0) return 0;
  int block = 1;
  while (block * 2 <= static_cast<int>(blockDim.x)) block *= 2;
  int tpr = 1;
  while (tpr < block && static_cast<long long>(tpr) * VEC * CHUNKS < cols) tpr *= 2;
  return static_cast<long long>(tpr) * VEC * CHUNKS >= cols ? tpr : 0;
}

// Runs body(tpr, Int<V>()) on the register path, V = VEC for rows of whole
// vectors, else 1 (Note [Scalar rows in registers]); false when the row
// does not fit, for the loop path.
template <int VEC, int CHUNKS, class F>
__device__ __forceinline__ bool with_register_path(long long cols, F&& body) {
  if (const int tpr = row_threads<VEC, CHUNKS>(cols)) {
    body(tpr, Int<VEC>());
    return true;
  }
  if constexpr (VEC > 1) {
    if (cols % VEC == 0) return false;
    if (const int tpr = row_threads<1, CHUNKS>(cols)) {
      body(tpr, Int<1>());
      return true;
    }
  }
  return false;
}

// Reduces over the tpr threads of one row (tpr a power of two; threads
// tpr * g ... tpr * g + tpr - 1 form row group g) and returns the result to
// all of them. Every thread of the block must call it (it may sync).
template <class R>
__device__ __forceinline__ typename R::AccT row_reduce(typename R::AccT v, int tpr) {
  typedef typename R::AccT Acc;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    if (m < tpr) v = R::combine(v, R::shfl(v, m));
  }
  if (tpr <= 32) return v;
  __shared__ Acc partial[32];
  const int warp = threadIdx.x / 32;
  const int per_row = tpr / 32;
  const int first = warp - warp % per_row;
  if (threadIdx.x % 32 == 0) partial[warp] = v;
  __syncthreads();
  Acc r = partial[first];
  for (int w = 1; w < per_row; ++w) r = R::combine(r, partial[first + w]);
  __syncthreads();
  return r;
}

// Where this thread sits in the register path's row groups.
template <class I>
struct RowGroup {
  int lane;     // thread within its row
  I group;      // row within the block's rows
  I per_block;  // rows per block
  bool active;  // false for threads past the last whole group
  __device__ explicit RowGroup(int tpr)
      : lane(static_cast<int>(threadIdx.x) % tpr),
        group(static_cast<I>(threadIdx.x / tpr)),
        per_block(static_cast<I>(blockDim.x / tpr)),
        active(static_cast<I>(threadIdx.x / tpr) < static_cast<I>(blockDim.x / tpr)) {}
};

// The register path's loops: f(lane, row, live, offset) for each row group
// step of this block (every thread runs every step, so row_reduce may
// sync; `live` is false past the last row), and f(k, col) for this
// thread's chunks of a live row.
template <class I, class F>
__device__ __forceinline__ void for_row_groups(I rows, I cols, int tpr, F&& f) {
  const RowGroup<I> rg(tpr);
  for (I base = static_cast<I>(blockIdx.x) * rg.per_block; base < rows;
       base += static_cast<I>(gridDim.x) * rg.per_block) {
    const I row = base + rg.group;
    const bool live = rg.active && row < rows;
    f(rg.lane, row, live, live ? row * cols : I(0));
  }
}

template <int VEC, int CHUNKS, class I, class F>
__device__ __forceinline__ void for_row_chunks(int lane, int tpr, I cols, bool live, F&& f) {
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const I c = (static_cast<I>(k) * tpr + lane) * VEC;
    if (live && c < cols) f(k, c);
  }
}

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

// A forward norm's x as stored: x.vec<N>(i, v) loads elements i .. i + N - 1.
// A generated prologue's Load functor has the same member (Note [Norm
// prologues] in fusion/norm_prologue.h).
template <class T>
struct StoredRows {
  const T* __restrict__ x;
  template <int N, class I, class A>
  __device__ __forceinline__ void vec(I i, A (&out)[N]) const {
    load_as<N>(x + i, out);
  }
  // One row, read by column (Note [Softmax prologues with broadcast
  // inputs] in fusion/norm_prologue.h): r.vec<N>(c, v) loads columns
  // c .. c + N - 1. A softmax prologue's Load functor has the same member.
  struct Row {
    const T* __restrict__ x;
    template <int N, class I, class A>
    __device__ __forceinline__ void vec(I c, A (&out)[N]) const {
      load_as<N>(x + c, out);
    }
  };
  template <class I>
  __device__ __forceinline__ Row row(I r, I cols) const {
    return Row{x + r * cols};
  }
};

// A backward norm's grad_in as stored: g.store<N>(i, v) writes elements
// i .. i + N - 1. A generated epilogue's Store functor has the same member
// (Note [Norm epilogues]) and stores what the epilogue computes from v.
template <class T>
struct StoredOut {
  T* __restrict__ gx;
  template <int N, class I, class A>
  __device__ __forceinline__ void store(I i, const A (&v)[N]) const {
    store_compute<N>(gx + i, v);
  }
};

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

// Register path (Note [Rows in registers]): max, then exp once per element
// kept in registers for the sum, then one write.
template <class T, class TO, class I, int VEC, int CHUNKS, bool LOG, class X>
__device__ __forceinline__ void softmax_forward_rows(const X x, TO* __restrict__ y, I rows, I cols,
                                                     int tpr) {
  typedef typename Compute<T>::type A;
  A v[CHUNKS][VEC];
  for_row_groups(rows, cols, tpr, [&](int lane, I row, bool live, I offset) {
    const auto xr = x.row(live ? row : I(0), cols);
    A m = Limits<A>::lowest();
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
      xr.template vec<VEC>(c, v[k]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = maximum(m, v[k][e]);
    });
    m = row_reduce<MaxReducer<A> >(m, tpr);
    A sum = A(0);
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A ex = mb::exp(v[k][e] - m);
        sum += ex;
        if (!LOG) v[k][e] = ex;
      }
    });
    sum = row_reduce<SumReducer<A> >(sum, tpr);
    const A log_sum = LOG ? mb::log(sum) : A(0);
    const A inv_sum = LOG ? A(0) : A(1) / sum;
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[k][e] = LOG ? v[k][e] - m - log_sum : v[k][e] * inv_sum;
      store_compute<VEC>(y + offset + c, v[k]);
    });
  });
}

// x: mb::StoredRows over the stored input, or a prologue's Load functor;
// both give x.row(r, cols).vec<N>(c, v).
template <class T, class TO, class I, int VEC, int CHUNKS, bool LOG, class X>
__device__ __forceinline__ void softmax_forward(const X x, TO* __restrict__ y, I rows, I cols) {
  typedef typename Compute<T>::type A;
  typedef SoftmaxReducer<A> R;
  if (with_register_path<VEC, CHUNKS>(cols, [&](int tpr, auto vec) {
        softmax_forward_rows<T, TO, I, decltype(vec)::value, CHUNKS, LOG>(x, y, rows, cols, tpr);
      }))
    return;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const auto xr = x.row(row, cols);
    TO* yr = y + row * cols;
    typename R::AccT s = R::identity();
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      xr.template vec<N>(c, v);
#pragma unroll
      for (int k = 0; k < N; ++k) R::add(s, v[k]);
    });
    s = block_reduce<R>(s);
    const A log_sum = mb::log(s.sum);
    const A inv_sum = A(1) / s.sum;
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      xr.template vec<N>(c, v);
#pragma unroll
      for (int k = 0; k < N; ++k)
        v[k] = LOG ? v[k] - s.max - log_sum : mb::exp(v[k] - s.max) * inv_sum;
      store_compute<N>(yr + c, v);
    });
  }
}

// softmax:     gx = y * (gy - sum(gy * y))
// log_softmax: gx = gy - exp(y) * sum(gy)
// Register path (Note [Rows in registers]): gy and y read once.
template <class T, class I, int VEC, int CHUNKS, bool LOG>
__device__ __forceinline__ void softmax_backward_rows(const T* __restrict__ gy,
                                                      const T* __restrict__ y, T* __restrict__ gx,
                                                      I rows, I cols, int tpr) {
  typedef typename Compute<T>::type A;
  A g[CHUNKS][VEC], o[CHUNKS][VEC];
  for_row_groups(rows, cols, tpr, [&](int lane, I, bool live, I offset) {
    A sum = A(0);
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
      load_as<VEC>(gy + offset + c, g[k]);
      load_as<VEC>(y + offset + c, o[k]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += LOG ? g[k][e] : g[k][e] * o[k][e];
    });
    sum = row_reduce<SumReducer<A> >(sum, tpr);
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        g[k][e] = LOG ? g[k][e] - mb::exp(o[k][e]) * sum : o[k][e] * (g[k][e] - sum);
      store_compute<VEC>(gx + offset + c, g[k]);
    });
  });
}

template <class T, class I, int VEC, int CHUNKS, bool LOG>
__device__ __forceinline__ void softmax_backward(const T* __restrict__ gy, const T* __restrict__ y,
                                                 T* __restrict__ gx, I rows, I cols) {
  typedef typename Compute<T>::type A;
  if (with_register_path<VEC, CHUNKS>(cols, [&](int tpr, auto vec) {
        softmax_backward_rows<T, I, decltype(vec)::value, CHUNKS, LOG>(gy, y, gx, rows, cols, tpr);
      }))
    return;
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

// One output element of a forward layer or RMS norm: (v - mean) * rstd,
// rounded to TO first when ROUND (an RMS norm whose chain casts x * rstd to
// its 16-bit dtype before the weight multiply: Note [RMS-norm rounding] in
// fusion/norm_lowering.h), times w, plus b when there is one.
template <class TO, bool ROUND, bool HAS_B, class A>
__device__ __forceinline__ A norm_output(A v, A mean, A rstd, A w, A b) {
  A n = (v - mean) * rstd;
  if constexpr (ROUND) n = static_cast<A>(to_compute(from_compute<TO>(n)));
  if constexpr (HAS_B) return n * w + b;
  return n * w;
}

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var biased.
// RMS (RMS == true): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
// Register path (Note [Rows in registers]): the row is read once; the
// mean, then the sum of squared deviations from it, are exact two-pass
// statistics over registers (RMS: the sum of squares only).
template <class T, class TO, class W, class I, int VEC, int CHUNKS, bool RMS, bool HAS_W,
          bool HAS_B, bool SAVE, bool ROUND, class X>
__device__ __forceinline__ void norm_forward_rows(const X& x, const W* __restrict__ w,
                                                  const W* __restrict__ b, TO* __restrict__ y,
                                                  typename Compute<T>::type* __restrict__ mean_out,
                                                  typename Compute<T>::type* __restrict__ rstd_out,
                                                  I rows, I cols, double eps, int tpr) {
  typedef typename Compute<T>::type A;
  const A inv_cols = A(1) / static_cast<A>(cols);
  A v[CHUNKS][VEC];
  for_row_groups(rows, cols, tpr, [&](int lane, I row, bool live, I offset) {
    A sum = A(0);
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
      x.template vec<VEC>(offset + c, v[k]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += RMS ? v[k][e] * v[k][e] : v[k][e];
    });
    sum = row_reduce<SumReducer<A> >(sum, tpr);
    const A mean = RMS ? A(0) : sum * inv_cols;
    A var = sum * inv_cols;
    if (!RMS) {
      A m2 = A(0);
      for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) m2 += (v[k][e] - mean) * (v[k][e] - mean);
      });
      var = row_reduce<SumReducer<A> >(m2, tpr) * inv_cols;
    }
    const A rstd = mb::rsqrt(var + static_cast<A>(eps));
    if (SAVE && live && lane == 0) {
      if (!RMS) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
      A wv[VEC], bv[VEC];
      load_param<HAS_W, VEC>(w + c, wv, A(1));
      load_param<HAS_B, VEC>(b + c, bv, A(0));
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        v[k][e] = norm_output<TO, ROUND, HAS_B>(v[k][e], mean, rstd, wv[e], bv[e]);
      store_compute<VEC>(y + offset + c, v[k]);
    });
  });
}

// A sum over the block returned to every thread: warp shuffles, then each
// thread adds the warps' partials after one barrier. Consecutive calls
// alternate `slot`, so a call's partials are never overwritten while a
// thread still reads them (the next call's barrier orders them).
template <class A>
__device__ __forceinline__ A block_all_sum(A v, int slot) {
  __shared__ A partial[2][32];
  v = warp_reduce<SumReducer<A> >(v);
  if (threadIdx.x % 32 == 0) partial[slot][threadIdx.x / 32] = v;
  __syncthreads();
  A total = partial[slot][0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[slot][w];
  return total;
}

// Note [A row per block]
// The wide entry of a forward layer or RMS norm (Note [Wide rows for few
// rows] in codegen/launch_tuning.h): a block of ceil(cols / VEC) threads
// rounded up to warps holds one row, a VEC vector a thread, so the chain
// of a few-rows launch is one load, two block sums and one store, with
// weight and bias loaded beside x. Against the register path with
// CHUNKS == 1 (row groups of a run-time width, a loop path beside it) it
// took 197x768 bf16 from 2.47 to 1.63 us on an H200 (a hand-written
// prototype, Inductor 1.54).
template <class T, class TO, class W, class I, int VEC, bool RMS, bool HAS_W, bool HAS_B, bool SAVE,
          bool ROUND, class X>
__device__ __forceinline__ void norm_forward_row_block(
    const X& x, const W* __restrict__ w, const W* __restrict__ b, TO* __restrict__ y,
    typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, I rows, I cols, double eps) {
  typedef typename Compute<T>::type A;
  const I c = static_cast<I>(threadIdx.x) * VEC;
  const bool mine = c < cols;
  A wv[VEC], bv[VEC];
  if (mine) {
    load_param<HAS_W, VEC>(w + c, wv, A(1));
    load_param<HAS_B, VEC>(b + c, bv, A(0));
  }
  const A inv_cols = A(1) / static_cast<A>(cols);
  int slot = 0;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    A v[VEC];
    A sum = A(0);
    if (mine) {
      x.template vec<VEC>(row * cols + c, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += RMS ? v[e] * v[e] : v[e];
    }
    sum = block_all_sum(sum, slot);
    slot ^= 1;
    const A mean = RMS ? A(0) : sum * inv_cols;
    A var = sum * inv_cols;
    if (!RMS) {
      A m2 = A(0);
      if (mine) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) m2 += (v[e] - mean) * (v[e] - mean);
      }
      var = block_all_sum(m2, slot) * inv_cols;
      slot ^= 1;
    }
    const A rstd = mb::rsqrt(var + static_cast<A>(eps));
    if (SAVE && threadIdx.x == 0) {
      if (!RMS) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    if (mine) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        v[e] = norm_output<TO, ROUND, HAS_B>(v[e], mean, rstd, wv[e], bv[e]);
      store_compute<VEC>(y + row * cols + c, v);
    }
  }
}

// y is written as TO (Note [Norm outputs in 16 bits]: a layer norm's f32
// result that only feeds a cast to bf16 or fp16 is stored cast). x is a
// StoredRows<T> or a prologue's Load functor, whose values are T's.
template <class T, class TO, class W, class I, int VEC, int CHUNKS, bool RMS, bool HAS_W,
          bool HAS_B, bool SAVE, bool ROUND, class X>
__device__ __forceinline__ void norm_forward(const X& x, const W* __restrict__ w,
                                             const W* __restrict__ b, TO* __restrict__ y,
                                             typename Compute<T>::type* __restrict__ mean_out,
                                             typename Compute<T>::type* __restrict__ rstd_out,
                                             I rows, I cols, double eps) {
  typedef typename Compute<T>::type A;
  typedef WelfordReducer<A> R;
  if (with_register_path<VEC, CHUNKS>(cols, [&](int tpr, auto vec) {
        norm_forward_rows<T, TO, W, I, decltype(vec)::value, CHUNKS, RMS, HAS_W, HAS_B, SAVE, ROUND,
                          X>(x, w, b, y, mean_out, rstd_out, rows, cols, eps, tpr);
      }))
    return;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    const I base = row * cols;
    if (RMS) {
      // The mean square: a plain sum, no Welford update per element.
      A sq = A(0);
      row_loop<VEC>(cols, [&](I c, auto n) {
        constexpr int N = decltype(n)::value;
        A v[N];
        x.template vec<N>(base + c, v);
#pragma unroll
        for (int k = 0; k < N; ++k) sq += v[k] * v[k];
      });
      const A rstd =
          mb::rsqrt(block_reduce<SumReducer<A> >(sq) / static_cast<A>(cols) + static_cast<A>(eps));
      if (SAVE && threadIdx.x == 0) rstd_out[row] = rstd;
      row_loop<VEC>(cols, [&](I c, auto n) {
        constexpr int N = decltype(n)::value;
        A v[N], wv[N];
        x.template vec<N>(base + c, v);
        load_param<HAS_W, N>(w + c, wv, A(1));
#pragma unroll
        for (int k = 0; k < N; ++k)
          v[k] = norm_output<TO, ROUND, false>(v[k], A(0), rstd, wv[k], A(0));
        store_compute<N>(y + base + c, v);
      });
      continue;
    }
    typename R::AccT acc = R::identity();
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N];
      x.template vec<N>(base + c, v);
#pragma unroll
      for (int k = 0; k < N; ++k) acc = R::combine(acc, R::make(v[k], 0));
    });
    acc = block_reduce<R>(acc);
    const A mean = acc.mean;
    const A var = acc.m2 / static_cast<A>(cols);
    const A rstd = mb::rsqrt(var + static_cast<A>(eps));
    if (SAVE && threadIdx.x == 0) {
      if (!RMS) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    row_loop<VEC>(cols, [&](I c, auto n) {
      constexpr int N = decltype(n)::value;
      A v[N], wv[N], bv[N];
      x.template vec<N>(base + c, v);
      load_param<HAS_W, N>(w + c, wv, A(1));
      load_param<HAS_B, N>(b + c, bv, A(0));
#pragma unroll
      for (int k = 0; k < N; ++k)
        v[k] = norm_output<TO, ROUND, HAS_B>(v[k], mean, rstd, wv[k], bv[k]);
      store_compute<N>(y + base + c, v);
    });
  }
}

// The backward's register path (Note [Rows in registers]): gy * w and xhat
// are read once and held for the second step, where the loop path below
// reads the row from memory again (ViT-B/16's 768-wide rows: 1.8x the bytes
// of one read).
template <class T, class W, class I, int VEC, int CHUNKS, bool RMS, bool HAS_W, class S>
__device__ __forceinline__ void norm_backward_rows(
    const T* __restrict__ gy, const T* __restrict__ x,
    const typename Compute<T>::type* __restrict__ mean,
    const typename Compute<T>::type* __restrict__ rstd, const W* __restrict__ w, const S& gx,
    I rows, I cols, int tpr) {
  typedef typename Compute<T>::type A;
  typedef PairSumReducer<A> R;
  const A inv_cols = A(1) / static_cast<A>(cols);
  A g[CHUNKS][VEC], h[CHUNKS][VEC];
  for_row_groups(rows, cols, tpr, [&](int lane, I row, bool live, I offset) {
    const A mu = RMS || !live ? A(0) : mean[row];
    const A r = live ? rstd[row] : A(0);
    typename R::AccT sums = R::identity();
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
      A wv[VEC];
      load_as<VEC>(gy + offset + c, g[k]);
      load_as<VEC>(x + offset + c, h[k]);
      load_param<HAS_W, VEC>(w + c, wv, A(1));
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        g[k][e] *= wv[e];
        h[k][e] = (h[k][e] - mu) * r;
        sums.a += g[k][e];
        sums.b += g[k][e] * h[k][e];
      }
    });
    sums = row_reduce<R>(sums, tpr);
    const A mean_g = RMS ? A(0) : sums.a * inv_cols;
    const A mean_gx = sums.b * inv_cols;
    for_row_chunks<VEC, CHUNKS>(lane, tpr, cols, live, [&](int k, I c) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) g[k][e] = r * (g[k][e] - mean_g - h[k][e] * mean_gx);
      gx.template store<VEC>(offset + c, g[k]);
    });
  });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w,
// xhat = (x - mean) * rstd; RMS drops the mean(g) term and has mean = 0.
template <class T, class W, class I, int VEC, int CHUNKS, bool RMS, bool HAS_W, class S>
__device__ __forceinline__ void norm_backward_input(
    const T* __restrict__ gy, const T* __restrict__ x,
    const typename Compute<T>::type* __restrict__ mean,
    const typename Compute<T>::type* __restrict__ rstd, const W* __restrict__ w, const S gx, I rows,
    I cols) {
  typedef typename Compute<T>::type A;
  typedef PairSumReducer<A> R;
  if (with_register_path<VEC, CHUNKS>(cols, [&](int tpr, auto vec) {
        norm_backward_rows<T, W, I, decltype(vec)::value, CHUNKS, RMS, HAS_W, S>(
            gy, x, mean, rstd, w, gx, rows, cols, tpr);
      }))
    return;
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
      gx.template store<N>(base + c, g);
    });
  }
}

// Per element of [rows, cols]: (gy * xhat, gy), summed over rows below.
template <class T, class I, bool RMS>
struct NormParamGradLoad {
  typedef Pair<typename Compute<T>::type> Value;
  static constexpr bool kTakesRow = true;  // mean and rstd are per row
  const T* __restrict__ gy;
  const T* __restrict__ x;
  const typename Compute<T>::type* __restrict__ mean;
  const typename Compute<T>::type* __restrict__ rstd;
  __device__ Value operator()(I linear, I row) const {
    typedef typename Compute<T>::type A;
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

// Note [Split parameter grads]
// dw = sum over rows of gy * xhat and db = sum over rows of gy reduce
// [rows, cols] over rows. One block per column tile leaves most SMs idle when
// there are few columns and many rows (ViT-B/16 training: 24 blocks for 12608
// rows took 0.75 ms against eager's 0.06 ms), so the rows are cut into
// `splits` chunks. Stage one writes one partial pair per chunk and column,
// stage two sums the chunks in order: deterministic, like eager.

// Rows past the last chunk's end read as zeros.
template <class T, class I, bool RMS>
struct ChunkedParamGradLoad {
  typedef typename NormParamGradLoad<T, I, RMS>::Value Value;
  static constexpr bool kTakesRow = true;
  NormParamGradLoad<T, I, RMS> inner;
  I rows;
  __device__ Value operator()(I linear, I row) const {
    return row < rows ? inner(linear, row) : Value{0, 0};
  }
};

template <class A>
struct PairStore {
  Pair<A>* __restrict__ out;
  template <class I>
  __device__ void operator()(I i, Pair<A> sums, I) const {
    out[i] = sums;
  }
};

template <class A, class I>
struct PairLoad {
  const Pair<A>* __restrict__ in;
  __device__ Pair<A> operator()(I i) const { return in[i]; }
};

// Stage one (block 32 x 8): partials[s, c] for chunk s of the rows.
template <class T, class I, bool RMS>
__device__ __forceinline__ void norm_backward_param_partials(
    const T* __restrict__ gy, const T* __restrict__ x,
    const typename Compute<T>::type* __restrict__ mean,
    const typename Compute<T>::type* __restrict__ rstd,
    Pair<typename Compute<T>::type>* __restrict__ partials, I rows, I cols, I splits) {
  typedef typename Compute<T>::type A;
  const ChunkedParamGradLoad<T, I, RMS> load{{gy, x, mean, rstd}, rows};
  const PairStore<A> store{partials};
  reduce_outer<PairSumReducer<A> >(load, store, splits, (rows + splits - 1) / splits, cols);
}

// Stage two (block 32 x 8): dw[c], db[c] = the sums of partials[:, c].
template <class W, class A, class I, bool HAS_W, bool HAS_B>
__device__ __forceinline__ void norm_backward_param_totals(const Pair<A>* __restrict__ partials,
                                                           W* __restrict__ dw, W* __restrict__ db,
                                                           I rows, I cols, I splits) {
  (void)rows;
  const PairLoad<A, I> load{partials};
  const NormParamGradStore<W, A, HAS_W, HAS_B> store{dw, db};
  reduce_outer<PairSumReducer<A> >(load, store, I(1), splits, cols);
}

}  // namespace mb
