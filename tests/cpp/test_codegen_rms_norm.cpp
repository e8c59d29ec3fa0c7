// Stages 7 + 8a: the RMS-norm groups the planner makes of every order of
// the chain (rms_norm_graphs.h) emit and compile with NVRTC to PTX for
// compute_90, both variants; a spec that rounds x * rstd before the weight
// multiply (Note [RMS-norm rounding] in src_cpp/fusion/norm_lowering.h)
// keeps that rounding in its PTX. No GPU needed.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <regex>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "common/error.h"
#include "rms_norm_graphs.h"

namespace mybackend {
namespace {

std::vector<CompileOutcome> compile(const std::vector<EmittedKernel>& kernels) {
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  std::vector<CompileRequest> requests;
  for (const auto& k : kernels) requests.push_back(compile_request(k, options));
  return CompilePool().compile(requests);
}

// Conversions of f32 to the 16-bit dtype in the PTX (scalar or paired).
std::size_t narrowing_cvts(const std::string& ptx, DType dtype) {
  const std::regex cvt(dtype == DType::BFloat16 ? R"(cvt\.rn\.bf16(x2)?\.f32)"
                                                : R"(cvt\.rn\.f16(x2)?\.f32)");
  return static_cast<std::size_t>(
      std::distance(std::sregex_iterator(ptx.begin(), ptx.end(), cvt), std::sregex_iterator()));
}

TEST(CodegenRmsNorm, PlannedGroupsOfEveryOrderCompileToPtx) {
  std::vector<EmittedKernel> kernels;
  std::vector<std::string> labels;
  for (RmsOrder order : {RmsOrder::Torch, RmsOrder::Llama, RmsOrder::T5}) {
    for (DType dtype : {DType::BFloat16, DType::Float16, DType::Float32}) {
      for (bool keep_rstd : {false, true}) {
        RmsChain c;
        c.order = order;
        c.dtype = dtype;
        c.keep_rstd = keep_rstd;
        Planned p = plan_chain(c);
        auto norms = p.groups(KernelKind::Norm);
        ASSERT_EQ(norms.size(), 1u) << p.plan.to_string();
        const NormGroup& g = *norms[0]->get<NormGroup>();
        for (const NormSpec* spec : {&g.spec, &g.general}) {
          kernels.push_back(emit_norm(*spec));
          labels.push_back(spec->to_string());
        }
      }
    }
  }
  const auto outcomes = compile(kernels);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << labels[i] << outcomes[i].error << "\n" << kernels[i].source;
  }
}

// The same spec with and without the rounding: the rounding variant
// converts to 16 bits more often (x * rstd, then the product), and every
// entry (register path, row per block) carries the flag.
TEST(CodegenRmsNorm, RoundingBeforeTheWeightIsInThePtx) {
  std::vector<EmittedKernel> kernels;
  std::vector<NormSpec> specs;
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (bool aligned : {true, false}) {
      for (bool round : {false, true}) {
        NormSpec spec;
        spec.kind = NormKind::RmsNormForward;
        spec.dtype = spec.out_dtype = spec.weight_dtype = dtype;
        spec.has_weight = true;
        spec.save_stats = false;
        spec.aligned = aligned;
        spec.index64 = !aligned;
        spec.round_before_weight = round;
        ASSERT_EQ(validate(spec), "") << spec.to_string();
        specs.push_back(spec);
        kernels.push_back(emit_norm(spec));
      }
    }
  }
  const auto outcomes = compile(kernels);
  for (std::size_t i = 0; i + 1 < kernels.size(); i += 2) {
    ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].error;
    ASSERT_TRUE(outcomes[i + 1].ok()) << outcomes[i + 1].error;
    const DType dtype = specs[i].dtype;
    EXPECT_GT(narrowing_cvts(outcomes[i + 1].kernel->image, dtype),
              narrowing_cvts(outcomes[i].kernel->image, dtype))
        << specs[i + 1].to_string();
    EXPECT_NE(specs[i].hash(), specs[i + 1].hash());
    EXPECT_NE(specs[i + 1].to_string().find("round_before_weight=1"), std::string::npos);
    EXPECT_EQ(specs[i].to_string().find("round_before_weight"), std::string::npos);
    // Every norm_forward instantiation ends in the flag: ", true>(" with it.
    const std::string& source = kernels[i + 1].source;
    std::size_t entries = 0;
    for (std::size_t at = source.find("mb::norm_forward"); at != std::string::npos;
         at = source.find("mb::norm_forward", at + 1)) {
      ++entries;
      const std::size_t close = source.find(">(", at);
      ASSERT_NE(close, std::string::npos);
      EXPECT_EQ(source.substr(close - 4, 4), "true") << source.substr(at, close + 2 - at);
    }
    EXPECT_GE(entries, 1u);
  }
}

TEST(CodegenRmsNorm, OnlyAWeightedRmsNormForwardRounds) {
  NormSpec s;
  s.kind = NormKind::RmsNormForward;
  s.dtype = s.out_dtype = s.weight_dtype = DType::BFloat16;
  s.round_before_weight = true;
  EXPECT_NE(validate(s).find("weight"), std::string::npos) << validate(s);  // no weight
  EXPECT_THROW(emit_norm(s), InternalError);
  s.has_weight = true;
  EXPECT_EQ(validate(s), "");
  s.kind = NormKind::LayerNormForward;
  EXPECT_FALSE(validate(s).empty());
  s.kind = NormKind::RmsNormBackward;
  EXPECT_FALSE(validate(s).empty());
}

}  // namespace
}  // namespace mybackend

#else

TEST(CodegenRmsNorm, NeedsCodegen) { GTEST_SKIP() << "built without CUDA codegen"; }

#endif
