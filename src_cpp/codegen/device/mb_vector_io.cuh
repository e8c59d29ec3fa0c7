// Vectorized global loads and stores: N consecutive elements moved as
// 16-byte (or narrower, for small N*sizeof(T)) chunks.
//
// Callers guarantee that p is aligned to min(16, N * sizeof(T)) bytes: the
// planner marks a tensor "aligned" only when its base is 16-byte aligned, and
// kernels only call these at element offsets that are multiples of N.
#pragma once

#include "mb_types.cuh"

namespace mb {

template <int BYTES>
struct Chunk;
template <>
struct Chunk<16> {
  typedef uint4 type;
};
template <>
struct Chunk<8> {
  typedef uint2 type;
};
template <>
struct Chunk<4> {
  typedef unsigned int type;
};
template <>
struct Chunk<2> {
  typedef unsigned short type;
};
template <>
struct Chunk<1> {
  typedef unsigned char type;
};

// Enumerators, not static constexpr members: under -default-device the
// latter become __device__ globals in the PTX.
template <class T, int N>
struct VecTraits {
  enum : int {
    kBytes = N * static_cast<int>(sizeof(T)),
    kChunkBytes = kBytes < 16 ? kBytes : 16,
    kChunks = kBytes / kChunkBytes,
  };
  typedef typename Chunk<kChunkBytes>::type ChunkT;
};

// The union is how the chunks become elements without a memcpy; every T used
// here (integers, bool, float, double, f16, bf16) is trivially copyable.
template <class T, int N>
union VecBits {
  typename VecTraits<T, N>::ChunkT chunks[VecTraits<T, N>::kChunks];
  T elems[N];
};

template <int N, class T>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, T (&out)[N]) {
  typedef VecTraits<T, N> Tr;
  VecBits<T, N> v;
  const typename Tr::ChunkT* src = reinterpret_cast<const typename Tr::ChunkT*>(p);
#pragma unroll
  for (int i = 0; i < Tr::kChunks; ++i) v.chunks[i] = src[i];
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = v.elems[i];
}

template <int N, class T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const T (&in)[N]) {
  typedef VecTraits<T, N> Tr;
  VecBits<T, N> v;
#pragma unroll
  for (int i = 0; i < N; ++i) v.elems[i] = in[i];
  typename Tr::ChunkT* dst = reinterpret_cast<typename Tr::ChunkT*>(p);
#pragma unroll
  for (int i = 0; i < Tr::kChunks; ++i) dst[i] = v.chunks[i];
}

// N elements of storage type T into registers of their compute type. N == 1
// is a plain scalar access and needs no alignment.
template <int N, class T, class C>
__device__ __forceinline__ void load_compute(const T* __restrict__ p, C (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = to_compute(p[0]);
  } else {
    T raw[N];
    load_vec<N>(p, raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_compute(raw[i]);
  }
}

// N elements in their storage type, converted where they are used: a thread
// that keeps several rows of loads in flight holds them at storage width
// (Note [Loads in flight at storage width] in mb_batch_norm.cuh).
template <int N, class T>
__device__ __forceinline__ void load_stored(const T* __restrict__ p, T (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = p[0];
  } else {
    load_vec<N>(p, out);
  }
}

template <int N, class T, class C>
__device__ __forceinline__ void store_compute(T* __restrict__ p, const C (&in)[N]) {
  if constexpr (N == 1) {
    p[0] = from_compute<T>(in[0]);
  } else {
    T raw[N];
#pragma unroll
    for (int i = 0; i < N; ++i) raw[i] = from_compute<T>(in[i]);
    store_vec<N>(p, raw);
  }
}

// N elements p[0], p[stride], ... of a strided operand, as issued by
// issue_strided and not yet used (Note [Strided loads issued together]).
template <int N, class T>
struct StridedRaw {
  VecBits<T, N> bits;  // adjacent elements (one vector) or element by element
  T single;            // the one element of a broadcast (stride 0)
  bool broadcast;
};

// Note [Strided loads issued together]
// Which branch a strided operand's load takes (one vector when the
// elements are adjacent and aligned, one element when they are all the
// same, else element by element) is decided at run time, but the compiler
// finished each branch -- unpacked its elements into registers, which waits
// for the load -- before the next operand's load was issued. A batch norm's
// four per-channel operands then cost four memory round trips per vector
// instead of one: 3.0 us per batch-1 kernel against Inductor's 1.5 on an
// H200, and 30 % slower at batch 32. So the load is split in two:
// issue_strided fills raw storage (the 16-byte chunks, or the one element)
// without reading it, and strided_at converts one element where the body
// reads it, after the kernel has issued every operand's load.
template <int N, class T, class I>
__device__ __forceinline__ void issue_strided(const T* __restrict__ p, I stride,
                                              StridedRaw<N, T>& raw) {
  typedef VecTraits<T, N> Tr;
  raw.broadcast = stride == 0;
  if (stride == 1 && reinterpret_cast<unsigned long long>(p) % Tr::kChunkBytes == 0) {
    const typename Tr::ChunkT* src = reinterpret_cast<const typename Tr::ChunkT*>(p);
#pragma unroll
    for (int i = 0; i < Tr::kChunks; ++i) raw.bits.chunks[i] = src[i];
  } else if (stride == 0) {
    raw.single = p[0];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) raw.bits.elems[k] = p[static_cast<I>(k) * stride];
  }
}

// Bit k set when element k of a vector, at coordinate c + k * step along
// a guard's axis (step 1 when the axis is the walk's innermost dim, else
// 0), lies in [lo, hi) (Note [Concatenations in pointwise kernels]).
template <int N, class I>
__device__ __forceinline__ unsigned range_mask(I c, I step, long long lo, long long hi) {
  unsigned mask = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const long long at = static_cast<long long>(c) + static_cast<long long>(k) * step;
    mask |= (at >= lo && at < hi ? 1u : 0u) << k;
  }
  return mask;
}

// issue_strided for a guarded operand: element k is read only when bit k
// of `mask` is set, and is 0 otherwise, so no element outside the piece is
// touched (Note [Concatenations in pointwise kernels]).
template <int N, class T, class I>
__device__ __forceinline__ void issue_guarded(const T* __restrict__ p, I stride, unsigned mask,
                                              StridedRaw<N, T>& raw) {
  if (mask == (1u << N) - 1u) {
    issue_strided<N>(p, stride, raw);
    return;
  }
  raw.broadcast = mask == 0;
  raw.single = T{};
  if (mask == 0) return;
#pragma unroll
  for (int k = 0; k < N; ++k)
    raw.bits.elems[k] = (mask >> k) & 1u ? p[static_cast<I>(k) * stride] : T{};
}

// Element k of a strided operand in its compute type.
template <int N, class T>
__device__ __forceinline__ auto strided_at(const StridedRaw<N, T>& raw, int k) {
  return to_compute(raw.broadcast ? raw.single : raw.bits.elems[k]);
}

}  // namespace mb
