// The table a grouped-cast kernel takes by value (Note [Grouped casts] in
// fusion/cast_groups.h). Plain C++ without CUDA keywords: NVRTC compiles it
// into the kernel and runtime/generated/cast_group_kernel.cpp fills the same struct on
// the host, so there is one layout and nothing to keep in sync.
#pragma once

namespace mb {

// Enumerators, not constexpr variables (-default-device makes those
// __device__ globals). 96 entries keep the table under the 4 KiB that
// every driver accepts for a launch's parameters.
enum : int { kCastTableSize = 96 };

struct CastTable {
  const void* src[kCastTableSize];
  void* dst[kCastTableSize];
  long long numel[kCastTableSize];
  // Tensor t owns blocks [first_block[t], first_block[t + 1]); entry
  // `count` is the launch's total.
  int first_block[kCastTableSize + 1];
  // A layout copy (Note [Grouped layout copies] in fusion/cast_groups.h)
  // reads src as [batch, a, b] and writes dst as [batch, b, a], both dense;
  // b == 0: element i to element i.
  int a[kCastTableSize];
  int b[kCastTableSize];
  unsigned char pair[kCastTableSize];  // which conversion of the spec
  int count;
};

}  // namespace mb
