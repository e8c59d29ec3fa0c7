// Stage 9 (runtime): the group floor's bookkeeping (Note [A group is timed
// against its ATen form] in runtime/group_floor.h): which form runs for a
// set of symbol values once it has been timed. The timing itself needs a
// GPU (tests/gpu/test_conv.py). Links the runtime (torch), so it builds as
// one skipped test where the runtime is not part of the build.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include "runtime/group_floor.h"

namespace mybackend {
namespace {

using Choice = GroupFloor::Choice;

TEST(GroupFloor, MeasuresEachShapeOnceThenKeepsItsChoice) {
  GroupFloor floor;
  const SymbolBindings batch8{{"s0", 8}}, batch1{{"s0", 1}};
  EXPECT_EQ(floor.choice(batch8), Choice::Measure);
  EXPECT_EQ(floor.record(batch8, 1201.5, 97.3), Choice::Aten);  // a slower library call loses
  EXPECT_EQ(floor.choice(batch8), Choice::Aten);
  EXPECT_EQ(floor.choice(batch1), Choice::Measure);  // another shape is timed on its own
  EXPECT_EQ(floor.record(batch1, 40.0, 60.0), Choice::Engine);
  EXPECT_EQ(floor.choice(batch1), Choice::Engine);
  EXPECT_EQ(floor.choice(batch8), Choice::Aten);
}

TEST(GroupFloor, TheEngineKeepsTheGroupWithinTheMargin) {
  GroupFloor floor;
  const double engine_us = 100.0;
  const double within = engine_us * (1 - GroupFloor::kMargin) + 0.5;
  EXPECT_EQ(floor.record({}, engine_us, within), Choice::Engine);  // noise, not a loss
  EXPECT_EQ(floor.record({}, engine_us, engine_us * (1 - GroupFloor::kMargin) - 0.5), Choice::Aten);
}

TEST(GroupFloor, ADeclinedEngineIsNotTimedAgain) {
  GroupFloor floor;
  floor.keep_engine({});
  EXPECT_EQ(floor.choice({}), Choice::Engine);
  EXPECT_EQ(floor.summary(), "");  // nothing was timed
}

TEST(GroupFloor, SummaryNamesTheTimesAndTheChoice) {
  GroupFloor floor;
  floor.record({{"s0", 32}}, 1201.5, 97.3);
  EXPECT_EQ(floor.summary(),
            "timed against ATen at s0=32: engine 1201.5 us, ATen 97.3 us: ATen runs");
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

TEST(GroupFloor, SkippedWithoutTheRuntime) { GTEST_SKIP() << "the runtime needs torch"; }

#endif
