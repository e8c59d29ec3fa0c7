// Stages 7 + 8a: tiled transposing copies (Note [Tiled transposing copies]
// in fusion/transposed_copies.h). The specs the planner makes for weights
// and activations of every float dtype, with and without a cast, and with
// 64-bit offsets, emit and compile with NVRTC to PTX for compute_90 (no GPU
// needed); the PTX stages the tile in shared memory, between barriers, and
// keeps the per-thread loads in registers.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <optional>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "fusion_graphs.h"
#include "ptx_testing.h"
#include "spec/transpose_spec.h"

namespace mybackend {
namespace {

// The spec the planner makes for `x` of `sizes` (dense in `from` layout,
// cast from `from_dtype`) copied into `to`'s layout and `dtype`.
TransposeSpec planned_spec(const std::vector<std::int64_t>& sizes, DType from_dtype, DType dtype,
                           bool from_channels_last) {
  GraphBuilder b;
  ValueId x = b.add_input(out(nchw(from_dtype, sizes, from_channels_last), "x"));
  if (from_dtype != dtype) {
    x = node1(b, "aten::_to_copy.default", {v(x), Argument::of_dtype(dtype)},
              nchw(dtype, sizes, from_channels_last), "cast");
  }
  b.set_outputs({v(
      node1(b, "aten::clone.default", {v(x)}, nchw(dtype, sizes, !from_channels_last), "clone"))});
  const Planned p = plan(b);
  const auto groups = p.groups(KernelKind::Transpose);
  EXPECT_EQ(groups.size(), 1u) << p.plan.to_string();
  return groups.empty() ? TransposeSpec{} : groups[0]->get<TransposeGroup>()->spec;
}

std::vector<TransposeSpec> planned_specs() {
  const DType floats[] = {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64};
  std::vector<TransposeSpec> specs;
  for (DType dtype : floats) {
    for (DType from : floats) {
      // A weight into channels-last (whole 9-element rows), with autocast's cast.
      specs.push_back(planned_spec({64, 64, 3, 3}, from, dtype, false));
    }
    // Odd slabs, long pieces beside few rows, activations both ways.
    specs.push_back(planned_spec({33, 17, 7, 7}, dtype, dtype, false));
    specs.push_back(planned_spec({1000, 3, 3, 3}, dtype, dtype, false));
    specs.push_back(planned_spec({2, 3, 224, 224}, dtype, dtype, false));
    specs.push_back(planned_spec({1, 64, 56, 56}, dtype, dtype, false));
    specs.push_back(planned_spec({1, 64, 56, 56}, dtype, dtype, true));
  }
  return specs;
}

TEST(CodegenTranspose, PlannedSpecsCompileToPtx) {
  std::vector<TransposeSpec> specs = planned_specs();
  // The same tiles with 64-bit offsets (tensors of 2^30 elements and more).
  const std::size_t planned = specs.size();
  for (std::size_t k = 0; k < planned; ++k) {
    TransposeSpec wide = specs[k];
    wide.index64 = true;
    specs.push_back(wide);
  }
  const std::vector<CompileOutcome> outcomes = compile_to_ptx(specs, emit_transpose);
  for (std::size_t k = 0; k < outcomes.size(); ++k) {
    if (!outcomes[k].ok()) continue;
    const std::string& ptx = outcomes[k].kernel->image;
    SCOPED_TRACE(specs[k].to_string());
    EXPECT_TRUE(has(ptx, R"(\.shared)")) << "no shared-memory tile";
    EXPECT_TRUE(has(ptx, R"(bar\.sync)")) << "no barrier between the walks";
    EXPECT_TRUE(has(ptx, R"(ld\.global)"));
    EXPECT_TRUE(has(ptx, R"(st\.global)"));
    // Note [Vector tile walks]: both sides have a 16-byte path.
    EXPECT_TRUE(has(ptx, R"(ld\.global(\.nc)?\.v4)")) << "no vector loads";
    EXPECT_TRUE(has(ptx, R"(st\.global\.v4)")) << "no vector stores";
    EXPECT_FALSE(has(ptx, kLocalMemory)) << "the held loads spilled";
  }
}

TEST(CodegenTranspose, TheSourceNamesItsTileAndEntry) {
  const TransposeSpec spec = planned_spec({64, 64, 3, 3}, DType::Float32, DType::BFloat16, false);
  const EmittedKernel kernel = emit_transpose(spec);
  ASSERT_EQ(kernel.entries.size(), 1u);
  const KernelEntry& entry = kernel.entries[0];
  EXPECT_EQ(entry.name.rfind("mb_transpose_", 0), 0u);
  EXPECT_EQ(entry.block_x, 256);
  std::vector<std::string> names;
  for (const KernelParam& p : entry.params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"in", "out", "batch", "size_a", "size_b", "in_batch",
                                             "in_a", "in_b", "out_batch", "out_a", "out_b"}));
  EXPECT_NE(kernel.source.find("mb::transpose_tiles<64, 9, 256, I>"), std::string::npos)
      << kernel.source;
  EXPECT_NE(kernel.source.find("const float* __restrict__ in, mb::bf16* __restrict__ out"),
            std::string::npos)
      << kernel.source;
  // Another tile is another kernel (Note [Spec text is the identity]).
  TransposeSpec other = spec;
  other.tile_a = 32;
  EXPECT_NE(emit_transpose(other).entries[0].name, entry.name);
}

}  // namespace
}  // namespace mybackend

#else

TEST(CodegenTranspose, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA codegen"; }

#endif  // MYBACKEND_WITH_CODEGEN
