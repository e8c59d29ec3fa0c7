// Stage 7: the conv planner (CUDA engine II) on hand-built IR graphs shaped
// like aot_autograd's (no torch, no GPU): which nodes become which cuDNN
// graph and epilogue, and which stay ATen calls.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fusion/conv_planner.h"
#include "fusion/fusion_plan.h"
#include "fusion_graphs.h"
#include "ir/graph.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;

Argument i(std::int64_t x) { return Argument::of_int(x); }
Argument flag(bool x) { return Argument::of_bool(x); }

FusionOptions conv_only() {
  FusionOptions options;  // generated kernels off
  options.matmul = false;
  return options;
}

Argument bools(std::vector<bool> values) {
  std::vector<Argument> items;
  for (bool x : values) items.push_back(Argument::of_bool(x));
  return Argument::of_list(std::move(items));
}

// x [2, 8, 6, 6] * w [8, 8 / groups, 3, 3] (+ bias [8]), padding 1: y [2, 8, 6, 6].
struct Conv {
  GraphBuilder b;
  DType dtype;
  ValueId x, w, bias = -1, y;
  // Inputs must precede nodes: the batch norm's and the adds' operands too.
  ValueId bn_weight, bn_bias, mean, var, channel_bias, plane;
  TensorType yt;
  explicit Conv(bool with_bias = false, bool transposed = false, DType dt = BF16,
                std::int64_t groups = 1, const char* device = "cuda:0")
      : dtype(dt) {
    x = b.add_input(out(tensor(dt, {2, 8, 6, 6}, device), "x"));
    w = b.add_input(out(tensor(dt, {8, 8 / groups, 3, 3}, device), "w"));
    if (with_bias) bias = b.add_input(out(tensor(dt, {8}, device), "bias"));
    const TensorType c = tensor(DType::Float32, {8}, device);
    bn_weight = b.add_input(out(c, "bn_weight"));
    bn_bias = b.add_input(out(c, "bn_bias"));
    mean = b.add_input(out(c, "mean"));
    var = b.add_input(out(c, "var"));
    channel_bias = b.add_input(out(tensor(dt, {8, 1, 1}, device), "channel_bias"));
    plane = b.add_input(out(tensor(dt, {6, 6}, device), "plane"));  // broadcast over N, C
    yt = tensor(dt, {2, 8, 6, 6}, device);
    y = b.add_node(NodeKind::Aten, "aten::convolution.default",
                   {v(x), v(w), with_bias ? v(bias) : Argument::none(), ints({1, 1}), ints({1, 1}),
                    ints({1, 1}), flag(transposed), ints({0, 0}), i(groups)},
                   {out(yt)}, "convolution")[0];
  }
  ValueId relu(ValueId in) {
    return b.add_node(NodeKind::Aten, "aten::relu.default", {v(in)}, {out(yt)}, "relu")[0];
  }
  ValueId add(ValueId a, ValueId other) {
    return b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(a), v(other), i(1)}, {out(yt)},
                      "add")[0];
  }
  // _native_batch_norm_legit_no_training(y, weight, bias, mean, var, momentum, eps).
  ValueId batch_norm(ValueId in) {
    return b.add_node(NodeKind::Aten, "aten::_native_batch_norm_legit_no_training.default",
                      {v(in), v(bn_weight), v(bn_bias), v(mean), v(var), Argument::of_float(0.1),
                       Argument::of_float(1e-5)},
                      {out(yt), out(tensor(DType::Float32, {0})), out(tensor(DType::Float32, {0}))},
                      "bn")[0];
  }
};

std::vector<const ConvSpec*> conv_specs(const Planned& p) {
  std::vector<const ConvSpec*> out;
  for (const KernelGroup* g : p.groups(KernelKind::Conv)) out.push_back(g->get<ConvSpec>());
  return out;
}

TEST(ConvPlanner, ConvBatchNormReluIsOneGraph) {
  Conv c;
  const ValueId r = c.relu(c.batch_norm(c.y));
  c.b.set_outputs({v(r)});
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u) << p.plan.to_string();
  const ConvSpec& s = *specs[0];
  EXPECT_EQ(p.groups(KernelKind::Conv)[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  EXPECT_EQ(s.direction, ConvDirection::Forward);
  EXPECT_TRUE(s.batch_norm);
  EXPECT_TRUE(s.relu);
  EXPECT_EQ(s.bias, -1);
  EXPECT_EQ(s.residual, -1);
  EXPECT_EQ(s.output, r);
  EXPECT_DOUBLE_EQ(s.bn.eps, 1e-5);
  EXPECT_EQ(s.bn.mean, c.mean);
  EXPECT_EQ(s.bn.var, c.var);
  EXPECT_EQ(s.bn.weight, c.bn_weight);
  EXPECT_EQ(s.epilogue_name(), "batch_norm+relu");
  EXPECT_EQ(s.stride, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(s.padding, (std::vector<std::int64_t>{1, 1}));
  EXPECT_NE(p.groups(KernelKind::Conv)[0]->spec.find("epilogue=batch_norm+relu"),
            std::string::npos);
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
}

TEST(ConvPlanner, BiasResidualReluOfABottleneckEnd) {
  Conv c(/*with_bias=*/true);
  const ValueId r = c.relu(c.add(c.y, c.x));
  c.b.set_outputs({v(r)});
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(specs[0]->bias, c.bias);
  EXPECT_EQ(specs[0]->residual, c.x);
  EXPECT_TRUE(specs[0]->relu);
  EXPECT_EQ(specs[0]->epilogue_name(), "bias+residual+relu");
  EXPECT_EQ(specs[0]->inputs(), (std::vector<ValueId>{c.x, c.w, c.bias, c.x}));
}

TEST(ConvPlanner, PerChannelAddIsTheBias) {
  Conv c;
  const ValueId b = c.channel_bias;
  const ValueId sum = c.add(c.y, b);
  c.b.set_outputs({v(sum)});
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0]->bias, b);
  EXPECT_EQ(specs[0]->output, sum);
}

TEST(ConvPlanner, NonPerChannelAddIsNotFused) {
  Conv c;
  const ValueId sum = c.add(c.y, c.plane);
  c.b.set_outputs({v(sum)});
  Planned p = plan(c.b, conv_only());
  const auto groups = p.groups(KernelKind::Conv);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0}));
  EXPECT_EQ(groups[0]->get<ConvSpec>()->epilogue_name(), "none");
  EXPECT_NE(groups[0]->why.find("neither per-channel"), std::string::npos) << groups[0]->why;
}

TEST(ConvPlanner, AnIntermediateWithASecondReaderEndsTheEpilogue) {
  Conv c;
  const ValueId bn = c.batch_norm(c.y);
  const ValueId r = c.relu(bn);
  const ValueId other = c.add(bn, r);  // bn read twice: relu stays outside
  c.b.set_outputs({v(other)});
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_TRUE(specs[0]->batch_norm);
  EXPECT_FALSE(specs[0]->relu);
  EXPECT_EQ(specs[0]->output, bn);
}

TEST(ConvPlanner, ConvOutputReturnedKeepsItsEpilogueOutside) {
  Conv c;
  const ValueId r = c.relu(c.y);
  c.b.set_outputs({v(r), v(c.y)});  // training saves the conv output
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_FALSE(specs[0]->relu);
  EXPECT_EQ(specs[0]->output, c.y);
}

TEST(ConvPlanner, ReluBeforeAResidualEndsTheChain) {
  Conv c;
  const ValueId r = c.relu(c.y);
  const ValueId sum = c.add(r, c.x);  // eager's order is residual, then relu
  c.b.set_outputs({v(sum)});
  Planned p = plan(c.b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_TRUE(specs[0]->relu);
  EXPECT_EQ(specs[0]->residual, -1);
  EXPECT_EQ(specs[0]->output, r);
}

TEST(ConvPlanner, TransposedConvolutionStaysAten) {
  Conv c(false, /*transposed=*/true);
  c.b.set_outputs({v(c.relu(c.y))});
  Planned p = plan(c.b, conv_only());
  EXPECT_TRUE(p.groups(KernelKind::Conv).empty());
  const auto aten = p.groups(KernelKind::AtenSequence);
  ASSERT_EQ(aten.size(), 1u);
  EXPECT_NE(aten[0]->why.find("no cuDNN group: a transposed convolution"), std::string::npos)
      << aten[0]->why;
}

TEST(ConvPlanner, GroupedAndDepthwiseConvolutionsAreGroups) {
  for (std::int64_t groups : {2, 8}) {
    Conv c(false, false, BF16, groups);
    c.b.set_outputs({v(c.y)});
    Planned p = plan(c.b, conv_only());
    auto specs = conv_specs(p);
    ASSERT_EQ(specs.size(), 1u);
    EXPECT_EQ(specs[0]->groups, groups);
  }
}

// Note [Grouped convolution biases]: a grouped convolution's cuDNN graph is
// the convolution alone; the per-channel add, batch norm and ReLU after it
// stay outside (a dense convolution takes them: the tests above).
TEST(ConvPlanner, GroupedConvolutionsTakeNoEpilogue) {
  for (std::int64_t groups : {2, 8}) {
    Conv c(false, false, BF16, groups);
    const ValueId biased = c.add(c.y, c.channel_bias);
    const ValueId normed = c.batch_norm(biased);
    c.b.set_outputs({v(c.relu(normed))});
    Planned p = plan(c.b, conv_only());
    auto groups_planned = p.groups(KernelKind::Conv);
    ASSERT_EQ(groups_planned.size(), 1u);
    EXPECT_EQ(groups_planned[0]->nodes, (std::vector<NodeId>{0})) << p.plan.to_string();
    EXPECT_EQ(groups_planned[0]->get<ConvSpec>()->epilogue_name(), "none");
    EXPECT_EQ(groups_planned[0]->get<ConvSpec>()->output, c.y);
  }
}

TEST(ConvPlanner, F64AndCpuAndOptionOffPlanNothing) {
  {
    Conv c(false, false, DType::Float64);
    c.b.set_outputs({v(c.y)});
    Planned p = plan(c.b, conv_only());
    EXPECT_TRUE(p.groups(KernelKind::Conv).empty());
    EXPECT_NE(p.groups(KernelKind::AtenSequence)[0]->why.find("dtype"), std::string::npos);
  }
  {
    Conv c(false, false, BF16, 1, "cpu");
    c.b.set_outputs({v(c.y)});
    EXPECT_TRUE(plan(c.b, conv_only()).groups(KernelKind::Conv).empty());
  }
  {
    Conv c;
    c.b.set_outputs({v(c.y)});
    FusionOptions off = conv_only();
    off.conv = false;
    EXPECT_TRUE(plan(c.b, off).groups(KernelKind::Conv).empty());
  }
}

TEST(ConvPlanner, OneDimensionalConvolutionStaysAten) {
  GraphBuilder b;
  const ValueId x = b.add_input(out(tensor(BF16, {2, 8, 6}), "x"));
  const ValueId w = b.add_input(out(tensor(BF16, {8, 8, 3}), "w"));
  const ValueId y = b.add_node(
      NodeKind::Aten, "aten::convolution.default",
      {v(x), v(w), Argument::none(), ints({1}), ints({1}), ints({1}), flag(false), ints({0}), i(1)},
      {out(tensor(BF16, {2, 8, 6}))}, "convolution")[0];
  b.set_outputs({v(y)});
  Planned p = plan(b, conv_only());
  EXPECT_TRUE(p.groups(KernelKind::Conv).empty());
  EXPECT_NE(p.groups(KernelKind::AtenSequence)[0]->why.find("1-d convolution"), std::string::npos);
}

TEST(ConvPlanner, BackwardHonoursTheOutputMask) {
  GraphBuilder b;
  const TensorType t = tensor(BF16, {2, 8, 6, 6});
  const ValueId dy = b.add_input(out(t, "dy"));
  const ValueId x = b.add_input(out(t, "x"));
  const ValueId w = b.add_input(out(tensor(BF16, {8, 8, 3, 3}), "w"));
  const TensorType no_tensor;
  const GraphBuilder::OutputSpec none{ValueKind::Opaque, no_tensor, std::nullopt, "none"};
  const auto outs =
      b.add_node(NodeKind::Aten, "aten::convolution_backward.default",
                 {v(dy), v(x), v(w), ints({0}), ints({1, 1}), ints({1, 1}), ints({1, 1}),
                  flag(false), ints({0, 0}), i(1), bools({false, true, false})},
                 {none, out(tensor(BF16, {8, 8, 3, 3})), none}, "conv_backward");
  b.set_outputs({v(outs[1])});
  Planned p = plan(b, conv_only());
  auto specs = conv_specs(p);
  ASSERT_EQ(specs.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(specs[0]->direction, ConvDirection::Backward);
  EXPECT_EQ(specs[0]->grad_output, dy);
  EXPECT_EQ(specs[0]->grad_input, -1);
  EXPECT_EQ(specs[0]->grad_weight, outs[1]);
  EXPECT_EQ(specs[0]->grad_bias, -1);
  EXPECT_EQ(specs[0]->inputs(), (std::vector<ValueId>{dy, x, w}));
}

// The matmul planner runs first but never takes convolutions; a pointwise
// group after the conv group is planned around it.
TEST(ConvPlanner, GeneratedKernelsGrowAroundTheConvGroup) {
  Conv c;
  const ValueId r = c.relu(c.y);
  const ValueId m =
      c.b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(r), v(c.x)}, {out(c.yt)}, "mul")[0];
  const ValueId s =
      c.b.add_node(NodeKind::Aten, "aten::sigmoid.default", {v(m)}, {out(c.yt)}, "sigmoid")[0];
  c.b.set_outputs({v(s)});
  Planned p = plan(c.b);  // generated kernels on
  ASSERT_EQ(p.groups(KernelKind::Conv).size(), 1u);
  EXPECT_EQ(p.groups(KernelKind::Conv)[0]->nodes, (std::vector<NodeId>{0, 1}));
  ASSERT_EQ(p.groups(KernelKind::Pointwise).size(), 1u);
  EXPECT_EQ(p.groups(KernelKind::Pointwise)[0]->nodes, (std::vector<NodeId>{2, 3}));
}

}  // namespace
}  // namespace mybackend
