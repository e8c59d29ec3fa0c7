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

}  // namespace mb
