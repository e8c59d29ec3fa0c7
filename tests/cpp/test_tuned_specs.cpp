// Stage 7 (fusion): the compile's launch tuning reaches the specs (Note
// [Tuning in the specs] in fusion/tuned_specs.h), and with them their text,
// the identity the kernel cache keys on. No process-wide tuning is involved:
// two plans of one process can differ in it.
#include <gtest/gtest.h>

#include <string>

#include "fusion/tuned_specs.h"
#include "fusion_graphs.h"

namespace mybackend {
namespace {

Planned exp_mul_relu(const FusionOptions& options) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "exp")[0];
  ValueId m = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(e), Argument::of_float(2.0)},
                         {out(t)}, "mul")[0];
  ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(m)}, {out(t)}, "relu")[0];
  b.set_outputs({v(r)});
  return plan(b, options);
}

TEST(TunedSpecs, DefaultTuningLeavesTheSpecTextAsItWas) {
  Planned p = exp_mul_relu(generated_options());
  auto groups = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(groups.size(), 1u);
  const PointwiseGroup& g = *groups[0]->get<PointwiseGroup>();
  EXPECT_EQ(g.spec.tuning, LaunchTuning{});
  EXPECT_EQ(g.spec.threads, LaunchTuning{}.pw_block);
  EXPECT_EQ(groups[0]->spec.find("tuning="), std::string::npos) << groups[0]->spec;
}

TEST(TunedSpecs, TheOptionsTuningReachesBothVariantsAndTheText) {
  FusionOptions options = generated_options();
  options.tuning.pw_block = 256;
  options.tuning.pw_vec_per_thread = 2;
  options.tuning.pw_blocks_per_sm = 4;
  Planned tuned = exp_mul_relu(options);
  Planned plain = exp_mul_relu(generated_options());
  auto groups = tuned.groups(KernelKind::Pointwise);
  ASSERT_EQ(groups.size(), 1u);
  const PointwiseGroup& g = *groups[0]->get<PointwiseGroup>();
  for (const PointwiseSpec* spec : {&g.spec, &g.general}) {
    EXPECT_EQ(spec->tuning, options.tuning);
    EXPECT_EQ(spec->threads, 256);
  }
  const std::string& text = groups[0]->spec;
  EXPECT_NE(text.find("tuning=[" + options.tuning.to_string() + "]"), std::string::npos) << text;
  EXPECT_EQ(text, g.spec.to_string());
  // Another tuning is another kernel: the spec's hash (its identity) differs.
  EXPECT_NE(g.spec.hash(),
            plain.groups(KernelKind::Pointwise)[0]->get<PointwiseGroup>()->spec.hash());
}

TEST(TunedSpecs, NormAndCastGroupSpecsTakeTheTuningToo) {
  LaunchTuning tuning;
  tuning.norm_block = 512;
  tuning.softmax_block = 64;
  tuning.pw_block = 256;
  FusionPlan plan;
  plan.partitions.resize(1);
  auto norm = std::make_shared<NormGroup>();
  norm->spec.kind = NormKind::SoftmaxForward;
  norm->general.kind = NormKind::LayerNormForward;
  KernelGroup norm_group;
  norm_group.set(norm);
  auto casts = std::make_shared<CastGroup>();
  casts->singles.push_back(std::make_shared<PointwiseGroup>());
  KernelGroup cast_group;
  cast_group.set(casts);
  plan.partitions[0].groups = {norm_group, cast_group};
  apply_launch_tuning(plan, tuning);
  const KernelGroup& n = plan.partitions[0].groups[0];
  EXPECT_EQ(n.get<NormGroup>()->spec.tuning, tuning);
  EXPECT_EQ(n.get<NormGroup>()->spec.threads, 64);      // softmax forward: softmax_block
  EXPECT_EQ(n.get<NormGroup>()->general.threads, 512);  // other norms: norm_block
  EXPECT_EQ(n.spec, n.get<NormGroup>()->spec.to_string());
  const KernelGroup& c = plan.partitions[0].groups[1];
  EXPECT_EQ(c.get<CastGroup>()->spec.tuning, tuning);
  EXPECT_EQ(c.get<CastGroup>()->spec.threads, 256);
  EXPECT_EQ(c.get<CastGroup>()->singles[0]->spec.tuning, tuning);
  EXPECT_EQ(norm->spec.tuning, LaunchTuning{}) << "the planned group is not edited in place";
}

}  // namespace
}  // namespace mybackend
