#include "runtime/fast_divisors.h"

namespace mybackend {

FastDivisor fast_divisor(std::uint32_t d) {
  FastDivisor f;
  while ((std::uint64_t{1} << f.shift) < d) ++f.shift;
  const std::uint64_t numerator = ((std::uint64_t{1} << f.shift) - d) << 32;
  f.multiplier = static_cast<std::uint32_t>(numerator / d + 1);
  return f;
}

std::uint32_t fast_divide(std::uint32_t n, FastDivisor f) {
  const auto high = static_cast<std::uint32_t>((std::uint64_t{n} * f.multiplier) >> 32);
  return (high + n) >> f.shift;
}

std::int64_t packed_divisor(std::int64_t size) {
  if (size < 1 || size >= (std::int64_t{1} << 31)) return 0;
  const FastDivisor f = fast_divisor(static_cast<std::uint32_t>(size));
  return static_cast<std::int64_t>((std::uint64_t{f.multiplier} << 32) | f.shift);
}

std::vector<std::int64_t> packed_divisors(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> out;
  out.reserve(shape.size());
  for (std::int64_t size : shape) out.push_back(packed_divisor(size));
  return out;
}

}  // namespace mybackend
