// Pipeline: the environment variables the compile options read, in one place
// (Note [Options from the environment] in pipeline/environment.h). Needs the
// runtime library (the pipeline's options hold its types).
#include <gtest/gtest.h>

#include <string>

#include "pipeline/environment.h"

namespace mybackend {
namespace {

const char* no_environment(const char*) { return nullptr; }

const char* a_b_run(const char* name) {
  const std::string n = name;
  if (n == "MYBACKEND_PW_BLOCK") return "256";
  if (n == "MYBACKEND_BN_MAX_LANES") return "64";
  if (n == "MYBACKEND_GENERATED_KERNELS") return "off";
  if (n == "MYBACKEND_NVRTC_TARGET") return "compute_80";
  if (n == "MYBACKEND_VIEW_REPLAY") return "0";
  if (n == "MYBACKEND_FUSED_CATS") return "off";
  if (n == "MYBACKEND_ROW_EPILOGUES") return "0";
  if (n == "MYBACKEND_HOST_TIMES") return "1";
  return nullptr;
}

TEST(Environment, NothingSetIsTheDefaults) {
  const CompileOptions options = options_from_environment(&no_environment);
  EXPECT_EQ(options.fusion.tuning, LaunchTuning{});
  EXPECT_EQ(options.codegen.switched_off, "");
  EXPECT_EQ(options.codegen.forced_target, "");
  EXPECT_TRUE(options.view_replay);
  EXPECT_TRUE(options.fusion.concatenations);
  EXPECT_TRUE(options.fusion.row_epilogues);
  EXPECT_FALSE(options.host_times);
}

TEST(Environment, KnobsAndTheKillSwitchBecomeOptions) {
  const CompileOptions options = options_from_environment(&a_b_run);
  EXPECT_EQ(options.fusion.tuning.pw_block, 256);
  EXPECT_EQ(options.fusion.tuning.bn_max_lanes, 64);
  EXPECT_EQ(options.fusion.tuning.norm_block, LaunchTuning{}.norm_block);
  EXPECT_NE(options.codegen.switched_off.find("MYBACKEND_GENERATED_KERNELS"), std::string::npos);
  EXPECT_EQ(options.codegen.forced_target, "compute_80");
  EXPECT_FALSE(options.view_replay);
  EXPECT_FALSE(options.fusion.concatenations);
  EXPECT_FALSE(options.fusion.row_epilogues);
  EXPECT_TRUE(options.host_times);
}

TEST(Environment, KnobsSetByNameCheckTheirValues) {
  LaunchTuning tuning;
  EXPECT_EQ(set_launch_knob(tuning, "softmax_block", 512), "");
  EXPECT_EQ(tuning.softmax_block, 512);
  EXPECT_NE(set_launch_knob(tuning, "softmax_block", 500), "");
  EXPECT_EQ(tuning.softmax_block, 512);
  EXPECT_NE(set_launch_knob(tuning, "no_such_knob", 1).find("unknown"), std::string::npos);
}

}  // namespace
}  // namespace mybackend
