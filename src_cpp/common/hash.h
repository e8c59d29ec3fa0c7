// Stable 64-bit hashing: the same bytes give the same hash in every process
// and on every machine, which std::hash does not promise. Caches on disk key
// on these values.
#pragma once

#include <cstdint>
#include <string_view>

namespace mybackend {

constexpr std::uint64_t kFnvOffsetBasis = 1469598103934665603ULL;

constexpr std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = kFnvOffsetBasis) {
  std::uint64_t hash = seed;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace mybackend
