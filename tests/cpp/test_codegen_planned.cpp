// Stages 7 + 8a: every spec variant the reduction, norm and pointwise planners
// produce (fast and general) emits and compiles with NVRTC to PTX for compute_90.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <functional>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "reduction_graphs.h"

namespace mybackend {
namespace {

std::vector<EmittedKernel> kernels_of(const Planned& p) {
  std::vector<EmittedKernel> out;
  for (const auto& part : p.plan.partitions) {
    for (const auto& g : part.groups) {
      if (const auto* reduction = g.get<ReductionGroup>()) {
        out.push_back(emit_reduction(reduction->spec));
        out.push_back(emit_reduction(reduction->general));
      }
      if (const auto* norm = g.get<NormGroup>()) {
        out.push_back(emit_norm(norm->spec));
        out.push_back(emit_norm(norm->general));
      }
      if (const auto* pointwise = g.get<PointwiseGroup>()) {
        out.push_back(emit_pointwise(pointwise->spec));
        out.push_back(emit_pointwise(pointwise->general));
      }
    }
  }
  return out;
}

TEST(CodegenPlanned, PlannedGroupsCompileToPtx) {
  std::vector<std::function<void(GraphBuilder&)>> graphs;
  for (DType d : {DType::Float32, DType::Float16, DType::BFloat16}) {
    graphs.push_back([d](GraphBuilder& b) {
      sum_with_prologue_and_epilogue(b, d, {4, 8}, {1}, false);
    });
    graphs.push_back([d](GraphBuilder& b) {
      sum_with_prologue_and_epilogue(b, d, {4, 1000}, {1}, true);
    });
    graphs.push_back([d](GraphBuilder& b) {
      sum_with_prologue_and_epilogue(b, d, {8, 16, 3}, {0, 1}, true);
    });
    graphs.push_back([d](GraphBuilder& b) {
      sum_with_prologue_and_epilogue(b, d, {8, 16}, {0, 1}, false);
    });
    graphs.push_back([d](GraphBuilder& b) { sum_times_reduced_operand(b, d, 2, false); });
    graphs.push_back([d](GraphBuilder& b) { softmax(b, d, -1, false); });
    graphs.push_back([d](GraphBuilder& b) { softmax(b, d, 1, true); });
    graphs.push_back([d](GraphBuilder& b) { layer_norm(b, d); });
    graphs.push_back([d](GraphBuilder& b) { rms_norm_chain(b, d, d != DType::Float32, true); });
    graphs.push_back([d](GraphBuilder& b) { elementwise_then_layer_norm(b, d, false, false); });
    graphs.push_back([d](GraphBuilder& b) { masked_by_a_fill(b, d); });
    graphs.push_back([d](GraphBuilder& b) { rms_norm_backward_rows(b, d); });
    graphs.push_back([d](GraphBuilder& b) { rms_norm_backward_rows(b, d, 200); });
    graphs.push_back([d](GraphBuilder& b) { column_sum_of_scaled_rows(b, d); });
  }
  std::vector<EmittedKernel> kernels;
  for (const auto& build : graphs) {
    GraphBuilder b;
    build(b);
    Planned p = plan(b);
    std::vector<EmittedKernel> k = kernels_of(p);
    EXPECT_FALSE(k.empty()) << p.plan.to_string();
    kernels.insert(kernels.end(), k.begin(), k.end());
  }
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  std::vector<CompileRequest> requests;
  for (const auto& k : kernels) requests.push_back(compile_request(k, options));
  std::vector<CompileOutcome> outcomes = CompilePool().compile(requests);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << outcomes[i].error << "\n" << kernels[i].source;
  }
}

}  // namespace
}  // namespace mybackend

#else

TEST(CodegenPlanned, NeedsCodegen) { GTEST_SKIP() << "built without CUDA codegen"; }

#endif
