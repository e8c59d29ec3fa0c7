// Stage 9: merging the dims a pointwise kernel walks as one, and the
// multiply-and-shift divisors of its index math (runtime/coalesced_dims.h,
// Note [Coalesced dims]; runtime/fast_divisors.h, Note [Divisors as multipliers]).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/coalesced_dims.h"
#include "runtime/fast_divisors.h"
#include "spec/kernel_spec.h"

namespace mybackend {
namespace {

using Dims = std::vector<std::int64_t>;

// The offset of every flat index, for every tensor: what a kernel computes.
std::vector<Dims> offsets(const Dims& shape, const std::vector<Dims>& strides) {
  std::int64_t numel = 1;
  for (std::int64_t s : shape) numel *= s;
  std::vector<Dims> out(strides.size());
  for (std::int64_t i = 0; i < numel; ++i) {
    std::int64_t rem = i;
    Dims offset(strides.size(), 0);
    for (std::size_t d = shape.size(); d-- > 0;) {
      const std::int64_t coord = rem % shape[d];
      rem /= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) offset[k] += coord * strides[k][d];
    }
    for (std::size_t k = 0; k < strides.size(); ++k) out[k].push_back(offset[k]);
  }
  return out;
}

// Coalesces and checks that every tensor's elements are where they were.
int coalesced(Dims& shape, std::vector<Dims>& strides) {
  const auto before = offsets(shape, strides);
  const std::size_t rank = shape.size();
  const int kept = coalesce_dims(shape, strides);
  EXPECT_EQ(shape.size(), rank);
  for (const Dims& s : strides) EXPECT_EQ(s.size(), rank);
  EXPECT_EQ(offsets(shape, strides), before);
  return kept;
}

TEST(CoalescedDims, PerChannelOperandOfAChannelsLastWalkKeepsOneModulus) {
  // [N, H, W, C] in memory order: a dense activation and a per-channel scale.
  Dims shape{2, 3, 5, 8};
  std::vector<Dims> strides{{120, 40, 8, 1}, {0, 0, 0, 1}};
  EXPECT_EQ(coalesced(shape, strides), 2);
  EXPECT_EQ(shape, (Dims{30, 1, 1, 8}));
  EXPECT_EQ(strides[0], (Dims{8, 0, 0, 1}));
  EXPECT_EQ(strides[1], (Dims{0, 0, 0, 1}));
}

TEST(CoalescedDims, DenseTensorsBecomeOneInnermostDim) {
  Dims shape{2, 3, 4};
  std::vector<Dims> strides{{12, 4, 1}, {0, 0, 0}};  // and a broadcast scalar
  EXPECT_EQ(coalesced(shape, strides), 1);
  EXPECT_EQ(shape, (Dims{1, 1, 24}));
  EXPECT_EQ(strides[0], (Dims{0, 0, 1}));
}

TEST(CoalescedDims, TransposedTensorKeepsItsDims) {
  Dims shape{4, 6};
  std::vector<Dims> strides{{6, 1}, {1, 4}};
  EXPECT_EQ(coalesced(shape, strides), 2);
  EXPECT_EQ(shape, (Dims{4, 6}));
  EXPECT_EQ(strides[1], (Dims{1, 4}));
}

TEST(CoalescedDims, SizeOneDimsAreDroppedWhateverTheirStride) {
  Dims shape{3, 1, 1, 5, 1};
  std::vector<Dims> strides{{5, 99, 7, 1, 3}, {1, 0, 4, 0, 9}};
  EXPECT_EQ(coalesced(shape, strides), 2);
  EXPECT_EQ(shape, (Dims{3, 1, 1, 1, 5}));
  EXPECT_EQ(strides[1], (Dims{1, 0, 0, 0, 0}));
}

TEST(CoalescedDims, OnlyDimsEveryTensorWalksAsOneMerge) {
  // The second tensor is a slice with a gap between rows of the middle dim.
  Dims shape{2, 3, 4};
  std::vector<Dims> strides{{12, 4, 1}, {15, 5, 1}};
  EXPECT_EQ(coalesced(shape, strides), 2);
  EXPECT_EQ(shape, (Dims{6, 1, 4}));
  EXPECT_EQ(strides[1], (Dims{5, 0, 1}));
}

TEST(CoalescedDims, ASingleElementIsLeftAsItIs) {
  Dims shape{1, 1};
  std::vector<Dims> strides{{7, 3}};
  EXPECT_EQ(coalesce_dims(shape, strides), 0);
  EXPECT_EQ(shape, (Dims{1, 1}));
  EXPECT_EQ(strides[0], (Dims{7, 3}));
}

// The kernel's quotient equals n / d for divisors and dividends at the
// edges (powers of two and their neighbours, the largest 32-bit index) and
// at random; the remainder follows from it.
// Note [Periodic operands]: element i at i mod period + (i div block) * period.
void expect_layout(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& strides,
                   std::int64_t period, std::int64_t block) {
  const PeriodicLayout layout = periodic_layout(shape, strides);
  EXPECT_EQ(layout.period, period);
  if (period > 0) EXPECT_EQ(layout.block, block);
}

TEST(PeriodicLayout, OperandsThatRepeatOverTheWholeWalk) {
  // [N, H, W, C] walk, a per-channel operand: period C, one block.
  expect_layout({2, 5, 5, 16}, {0, 0, 0, 1}, 16, 2 * 5 * 5 * 16);
  // A [S, H] table broadcast over the batch of a [B, S, H] walk: period S * H.
  expect_layout({4, 3, 8}, {0, 8, 1}, 24, 96);
  // Size-1 dims are skipped whatever their strides; a dense tensor is one period.
  expect_layout({4, 1, 8}, {0, 99, 1}, 8, 32);
  expect_layout({4, 8}, {8, 1}, 32, 32);
  // A broadcast scalar repeats every element.
  expect_layout({4, 8}, {0, 0}, 1, 32);
}

TEST(PeriodicLayout, OperandsThatRepeatWithinRows) {
  // A squeeze-excitation gate [N, C] over a channels-last [N, H, W, C] walk.
  expect_layout({2, 5, 5, 16}, {16, 0, 0, 1}, 16, 5 * 5 * 16);
  // Broadcast between dense dims; a column broadcast (period 1).
  expect_layout({4, 3, 8}, {8, 0, 1}, 8, 24);
  expect_layout({4, 8}, {1, 0}, 1, 8);
}

TEST(PeriodicLayout, OtherLayoutsHaveNone) {
  expect_layout({4, 8}, {1, 4}, 0, 0);         // transposed
  expect_layout({4, 8}, {0, 2}, 0, 0);         // a gap within the row
  expect_layout({2, 4, 8}, {64, 0, 1}, 0, 0);  // rows with gaps between them
  expect_layout({2, 4, 8}, {0, 8, 0}, 0, 0);   // broadcast innermost, then dense
  expect_layout({3, 4, 8}, {8, 0, 1}, 8, 32);  // rows after the block: fine
}

// Every layout periodic_layout accepts puts element i where the strides do.
TEST(PeriodicLayout, AgreesWithTheStrides) {
  const std::vector<std::vector<std::int64_t>> shapes = {{2, 3, 4, 8}, {3, 1, 5, 4}};
  for (const auto& shape : shapes) {
    for (int mask = 0; mask < 16; ++mask) {  // which dims broadcast
      std::vector<std::int64_t> strides(shape.size(), 0);
      std::int64_t next = 1;
      for (std::size_t d = shape.size(); d-- > 0;) {
        if (mask & (1 << d)) continue;
        strides[d] = next;
        next *= shape[d];
      }
      const PeriodicLayout layout = periodic_layout(shape, strides);
      if (layout.period == 0) continue;
      std::int64_t numel = 1;
      for (std::int64_t s : shape) numel *= s;
      for (std::int64_t i = 0; i < numel; ++i) {
        std::int64_t rem = i, offset = 0;
        for (std::size_t d = shape.size(); d-- > 0;) {
          offset += (rem % shape[d]) * strides[d];
          rem /= shape[d];
        }
        ASSERT_EQ(i % layout.period + (i / layout.block) * layout.period, offset)
            << "mask " << mask << " element " << i;
      }
    }
  }
}

TEST(FastDivisors, QuotientsAreExactBelowTwoToThe31) {
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 1024; ++d) divisors.push_back(d);
  for (int s = 10; s <= 31; ++s) {
    const std::uint32_t p = std::uint32_t{1} << s;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any(1, (std::uint32_t{1} << 31) - 1);
  for (int k = 0; k < 2000; ++k) divisors.push_back(any(gen));
  const std::uint32_t top = (std::uint32_t{1} << 31) - 1;
  for (std::uint32_t d : divisors) {
    if (d > top) continue;
    const FastDivisor f = fast_divisor(d);
    std::vector<std::uint32_t> dividends = {0, 1, d - 1, d, d + 1, top, top - 1, top - d};
    for (std::uint32_t m : {2u, 3u, 1000u}) {
      if (std::uint64_t{d} * m <= top) dividends.insert(dividends.end(), {d * m - 1, d * m});
    }
    for (int k = 0; k < 200; ++k) dividends.push_back(any(gen));
    for (std::uint32_t n : dividends) {
      if (n > top) continue;
      ASSERT_EQ(fast_divide(n, f), n / d) << n << " / " << d;
    }
  }
}

TEST(FastDivisors, PackedAsMultiplierAndShift) {
  const std::vector<std::int64_t> packed = packed_divisors({1, 6, 1024, 0, std::int64_t{1} << 31});
  ASSERT_EQ(packed.size(), 5u);
  EXPECT_EQ(packed[0], (std::int64_t{1} << 32) | 0);  // m = 1, s = 0: n itself
  const FastDivisor six = fast_divisor(6);
  EXPECT_EQ(six.shift, 3u);
  EXPECT_EQ(packed[1], static_cast<std::int64_t>((std::uint64_t{six.multiplier} << 32) | 3));
  EXPECT_EQ(packed[2], (std::int64_t{1} << 32) | 10);  // a power of two: a shift
  EXPECT_EQ(packed[3], 0);
  EXPECT_EQ(packed[4], 0);
}

}  // namespace
}  // namespace mybackend
