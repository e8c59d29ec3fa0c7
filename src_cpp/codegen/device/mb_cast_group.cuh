// Grouped casts (Note [Grouped casts] in fusion/cast_groups.h): each block
// converts one chunk of one tensor of a CastTable. The emitter writes only
// the entry point and its switch over the spec's conversions.
#pragma once

#include "mb_cast_table.cuh"
#include "mb_vector_io.cuh"

namespace mb {

// Elements per 16-byte access of the narrower side, at most 8.
template <class S, class D>
struct CastVec {
  enum : int {
    kNarrow = sizeof(S) < sizeof(D) ? static_cast<int>(sizeof(S)) : static_cast<int>(sizeof(D)),
    kVec = 16 / kNarrow > 8 ? 8 : 16 / kNarrow,
  };
};

// The table entry that owns `block`: the last t with first_block[t] <=
// block (empty tensors are never in the table, so it is unique).
__device__ __forceinline__ int cast_table_entry(const CastTable& table, int block) {
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (table.first_block[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Converts n <= blockDim.x * PER_THREAD elements. When both bases are
// 16-byte aligned the block moves whole vectors, all loads of a thread
// issued before its stores; what is left (all of it when unaligned) goes
// element by element. Offsets are below the chunk size, so 32 bits hold
// them: the caller moved the bases by the chunk's 64-bit start.
template <class S, class D, int PER_THREAD>
__device__ __forceinline__ void cast_chunk(const S* __restrict__ src, D* __restrict__ dst, int n) {
  enum : int { VEC = CastVec<S, D>::kVec, UNROLL = PER_THREAD / VEC };
  const unsigned long long bases =
      reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst);
  int done = 0;
  if ((bases & 15) == 0) {
    const int nvec = n / VEC;
    S raw[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int v = u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      if (v < nvec) load_vec<VEC>(src + v * VEC, raw[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int v = u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      if (v >= nvec) continue;
      D out[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = from_compute<D>(to_compute(raw[u][k]));
      store_vec<VEC>(dst + v * VEC, out);
    }
    done = nvec * VEC;
  }
  for (int i = done + static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    dst[i] = from_compute<D>(to_compute(src[i]));
}

// Writes dst elements [start, start + n) (n at most a chunk) of a
// layout copy: dst, dense [batch, b, a], takes src, dense [batch, a, b]
// (Note [Grouped layout copies] in fusion/cast_groups.h). Element j of dst
// is (k, s, c) with j = (k b + s) a + c, read from (k a + c) b + s. A
// thread stores VEC consecutive c at once when a row of a holds whole
// vectors and dst is aligned; it reads them at stride b, from lines the
// block's other rows s also read. I is 32-bit when the tensor allows.
template <class S, class D, class I>
__device__ __forceinline__ void layout_copy_chunk(const S* __restrict__ src, D* __restrict__ dst,
                                                  I start, int n, I a, I b) {
  enum : int { VEC = CastVec<S, D>::kVec };
  if (a % VEC == 0 && (reinterpret_cast<unsigned long long>(dst + start) & 15) == 0) {
    const int nvec = n / VEC;
    for (int v = static_cast<int>(threadIdx.x); v < nvec; v += static_cast<int>(blockDim.x)) {
      const I j = start + static_cast<I>(v) * VEC;
      const I row = j / a;
      const I c = j - row * a;
      const I k = row / b;
      const I s = row - k * b;
      const S* p = src + (k * a + c) * b + s;
      D out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] = from_compute<D>(to_compute(p[static_cast<I>(e) * b]));
      store_vec<VEC>(dst + j, out);
    }
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    const I j = start + static_cast<I>(i);
    const I row = j / a;
    const I c = j - row * a;
    const I k = row / b;
    const I s = row - k * b;
    dst[j] = from_compute<D>(to_compute(src[(k * a + c) * b + s]));
  }
}

// A table entry's layout copy, in 32-bit index math when its tensor fits.
template <class S, class D>
__device__ __forceinline__ void layout_copy_entry(const CastTable& table, int t, long long start,
                                                  int n) {
  const S* src = static_cast<const S*>(table.src[t]);
  D* dst = static_cast<D*>(table.dst[t]);
  if (table.numel[t] <= 0x7fffffffLL) {
    layout_copy_chunk<S, D, unsigned>(src, dst, static_cast<unsigned>(start), n,
                                      static_cast<unsigned>(table.a[t]),
                                      static_cast<unsigned>(table.b[t]));
  } else {
    layout_copy_chunk<S, D, long long>(src, dst, start, n, table.a[t], table.b[t]);
  }
}

}  // namespace mb
