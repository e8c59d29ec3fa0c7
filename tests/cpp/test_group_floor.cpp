// Stage 9 (runtime): the group floor's bookkeeping (Note [A group is timed
// against its ATen form] in runtime/group_floor.h): which form runs for a
// set of symbol values once it has been timed. The timing itself needs a
// GPU (tests/gpu/test_conv.py). Links the runtime (torch), so it builds as
// one skipped test where the runtime is not part of the build.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

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

// Note [Group floor choices on disk]. POSIX calls, not std::filesystem: this
// binary links libtorch, whose copy of std::filesystem's symbols it would
// call (a crash in remove_all, seen with GCC 12).
class GroupFloorFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/mb_group_floor_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0); }
  static bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }
  std::string root_;
};

TEST_F(GroupFloorFile, ALaterFloorWithTheKeyStartsWithTheSavedChoices) {
  const std::string key = "conv 7x7 depthwise; H200";
  const std::string file = group_floor_file(root_, key);
  const SymbolBindings batch32{{"s0", 32}}, batch1{{"s0", 1}};
  {
    GroupFloor first(key, file);
    EXPECT_EQ(first.choice(batch32), Choice::Measure);
    first.record(batch32, 1201.5, 97.3);
    first.record(batch1, 40.0, 60.0);
    EXPECT_TRUE(exists(file));
  }
  GroupFloor later(key, file);  // another process, the same group
  EXPECT_EQ(later.load_problem(), "");
  EXPECT_EQ(later.choice(batch32), Choice::Aten);
  EXPECT_EQ(later.choice(batch1), Choice::Engine);
  EXPECT_EQ(later.choice({{"s0", 8}}), Choice::Measure);
  EXPECT_NE(later.summary().find("ATen runs, saved"), std::string::npos) << later.summary();
  GroupFloor other("another group", file);  // a file of another key is not taken
  EXPECT_EQ(other.choice(batch32), Choice::Measure);
  EXPECT_NE(other.load_problem(), "");
}

TEST_F(GroupFloorFile, ACorruptFileIsIgnoredAndRewritten) {
  const std::string key = "group";
  const std::string file = group_floor_file(root_, key);
  ASSERT_EQ(::mkdir((root_ + "/group_floor").c_str(), 0700), 0);
  std::ofstream(file) << "not an entry";
  GroupFloor floor(key, file);
  EXPECT_NE(floor.load_problem(), "");
  EXPECT_EQ(floor.choice({}), Choice::Measure);
  floor.record({}, 10.0, 100.0);
  EXPECT_EQ(GroupFloor(key, file).choice({}), Choice::Engine);
}

TEST_F(GroupFloorFile, WithoutAFileChoicesStayInMemory) {
  GroupFloor floor("group", "");
  floor.record({}, 100.0, 10.0);
  EXPECT_EQ(floor.choice({}), Choice::Aten);
  EXPECT_FALSE(exists(root_ + "/group_floor"));
}

TEST(GroupFloor, SavedChoicesRoundTripAndBadTextIsRefused) {
  const std::vector<GroupFloor::Saved> choices = {{{{"s0", 32}, {"s1", 7}}, {1201.5, 97.25, true}},
                                                  {{}, {40.0, 60.0, false}}};
  const auto back = GroupFloor::decode(GroupFloor::encode(choices));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].bindings, choices[0].bindings);
  EXPECT_EQ((*back)[0].timing.aten_us, 97.25);
  EXPECT_TRUE((*back)[0].timing.aten_runs);
  EXPECT_TRUE((*back)[1].bindings.empty());
  for (const char* bad :
       {"s0=3 1 2", "s0=x 1 2 1\n", "s0=3 1 2 7\n", "=3 1 2 0\n", "- 1 2 0 extra\n"})
    EXPECT_FALSE(GroupFloor::decode(bad).has_value()) << bad;
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

TEST(GroupFloor, SkippedWithoutTheRuntime) { GTEST_SKIP() << "the runtime needs torch"; }

#endif
