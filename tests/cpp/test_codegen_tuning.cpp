// Stage 8a (codegen): a spec's launch tuning is part of the kernel cache's
// key (Note [Tuning in the specs]): the emitted source carries the spec text,
// so two tunings of one computation are two cache entries, and the default
// tuning keeps the key it always had. Needs NVRTC's library (the cache);
// builds as one skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CODEGEN

#include <optional>
#include <string>

#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"

namespace mybackend {
namespace {

PointwiseSpec bf16_exp() {
  PointwiseSpec spec;
  spec.rank = 1;
  spec.threads = LaunchTuning{}.pw_block;
  spec.inputs = {TensorArg{DType::BFloat16, IndexMode::Aligned, 0}};
  spec.instrs = {PwInstr{PwOp::Load, DType::BFloat16, {}, 0},
                 PwInstr{PwOp::Exp, DType::BFloat16, {0}, -1}};
  spec.outputs = {PwOutput{TensorArg{DType::BFloat16, IndexMode::Aligned, 0}, 1}};
  return spec;
}

std::string key_of(const PointwiseSpec& spec) {
  KernelCache cache(KernelCacheOptions{KernelCacheMode::MemoryOnly, "", "test"},
                    [](const std::string&) { return std::optional<std::string>(); });
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  return cache.key(compile_request(emit_pointwise(spec), options));
}

TEST(CodegenTuning, TheTuningIsPartOfTheCacheKey) {
  const PointwiseSpec plain = bf16_exp();
  PointwiseSpec tuned = plain;
  tuned.tuning.pw_vec_per_thread = 2;  // changes the emitted unroll
  PointwiseSpec launch_only = plain;
  launch_only.tuning.pw_blocks_per_sm = 8;  // changes only the launch
  PointwiseSpec same = plain;
  same.tuning = LaunchTuning{};
  EXPECT_NE(key_of(plain), key_of(tuned));
  EXPECT_NE(key_of(plain), key_of(launch_only));
  EXPECT_NE(key_of(tuned), key_of(launch_only));
  EXPECT_EQ(key_of(plain), key_of(same));
  EXPECT_NE(emit_pointwise(tuned).source.find("pw_vec_per_thread=2"), std::string::npos);
}

}  // namespace
}  // namespace mybackend

#else

TEST(CodegenTuning, NeedsCuda) { GTEST_SKIP() << "built without CUDA (no NVRTC)"; }

#endif
