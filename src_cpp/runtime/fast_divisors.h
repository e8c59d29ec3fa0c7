// Runtime divisors of generated kernels' index math as multiply-and-shift
// pairs (torch-free, unit-tested in tests/cpp/test_coalesced_dims.cpp).
//
// Note [Divisors as multipliers]
// A strided tensor's offset peels one coordinate per dim off the flat index:
// a division and a remainder by a size known only at launch. On the GPU a
// 32-bit division by a runtime value is a subroutine of about twenty
// instructions, and a batch-1 kernel, with a few warps on each SM, waits on
// every one of them: the per-channel operands of MobileNet's batch-norm
// kernels spent more instructions finding their channel than computing.
// For the 32-bit index variant the launch passes, beside each size d, a
// multiplier m and a shift s with floor(n / d) = (umulhi(n, m) + n) >> s
// for every n < 2^31 (Granlund and Montgomery; s = ceil(log2 d),
// m = floor(2^32 (2^s - d) / d) + 1), which is where the 32-bit variant's
// indices live (kIndex32Limit). The remainder is n - q d. The 64-bit
// variant keeps plain division.
#pragma once

#include <cstdint>
#include <vector>

namespace mybackend {

struct FastDivisor {
  std::uint32_t multiplier = 0;
  std::uint32_t shift = 0;
};

// The pair for divisor `d`, 1 <= d < 2^31.
FastDivisor fast_divisor(std::uint32_t d);

// floor(n / d) the way a kernel computes it; valid for n < 2^31.
std::uint32_t fast_divide(std::uint32_t n, FastDivisor f);

// `size` as the kernel receives it: (m << 32) | s, or 0 for a size outside
// [1, 2^31) (which a 32-bit launch never divides by).
std::int64_t packed_divisor(std::int64_t size);

// packed_divisor of each size of `shape`.
std::vector<std::int64_t> packed_divisors(const std::vector<std::int64_t>& shape);

}  // namespace mybackend
