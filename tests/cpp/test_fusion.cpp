// Stage 7: the pointwise planner on hand-built IR graphs (no torch, no GPU).
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/pointwise_lowering.h"
#include "fusion/pointwise_planner.h"
#include "fusion/sorted_ids.h"
#include "fusion/type_promotion.h"
#include "fusion_graphs.h"
#include "ir/graph.h"

namespace mybackend {
namespace {

TEST(SortedIds, AMergeKeepsEachIdOnce) {
  // Repeats on either side collapse: kept, they doubled with every DenseNet
  // layer the planner's dependency lists were merged through.
  std::vector<int> into = {1, 3, 3, 7};
  merge_into(into, {0, 3, 3, 3, 7, 9});
  EXPECT_EQ(into, (std::vector<int>{0, 1, 3, 7, 9}));
  std::vector<int> doubled = into;
  for (int layer = 0; layer < 40; ++layer) merge_into(doubled, doubled);
  EXPECT_EQ(doubled, into);
  merge_into(into, {});
  EXPECT_EQ(into, (std::vector<int>{0, 1, 3, 7, 9}));
}

TEST(FusionPlan, ChainOfElementwiseOpsIsOneKernel) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "exp")[0];
  ValueId m = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(e), Argument::of_float(2.0)},
                         {out(t)}, "mul")[0];
  ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(m)}, {out(t)}, "relu")[0];
  b.set_outputs({v(r)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u);
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
  const std::string& spec = pointwise[0]->spec;
  EXPECT_NE(spec.find("exp %0 : f32"), std::string::npos) << spec;
  EXPECT_NE(spec.find("mul %1, %2 : f32"), std::string::npos) << spec;
  EXPECT_NE(spec.find("relu %3 : f32"), std::string::npos) << spec;
  EXPECT_NE(spec.find("in0 f32 aligned"), std::string::npos) << spec;
  EXPECT_NE(spec.find("out0 f32 aligned = %4"), std::string::npos) << spec;
  EXPECT_EQ(pointwise[0]->get<PointwiseGroup>()->outputs, (std::vector<ValueId>{r}));
  // The general variant strides everything and indexes in 64 bits.
  const std::string general = pointwise[0]->get<PointwiseGroup>()->general.to_string();
  EXPECT_NE(general.find("index=i64"), std::string::npos) << general;
  EXPECT_NE(general.find("in0 f32 strided rank=2"), std::string::npos) << general;
  EXPECT_NE(p.plan.to_string().find("pointwise nodes=[0,1,2]"), std::string::npos)
      << p.plan.to_string();
}

TEST(FusionPlan, ValuesUsedOutsideBecomeOutputs) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {16});
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "exp")[0];
  ValueId s = b.add_node(NodeKind::Aten, "aten::sigmoid.default", {v(e)}, {out(t)}, "sig")[0];
  ValueId n = b.add_node(NodeKind::Aten, "aten::neg.default", {v(s)}, {out(t)}, "neg")[0];
  b.set_outputs({v(e), v(n)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u);
  EXPECT_EQ(pointwise[0]->get<PointwiseGroup>()->outputs, (std::vector<ValueId>{e, n}));
  EXPECT_EQ(pointwise[0]->get<PointwiseGroup>()->spec.outputs.size(), 2u);
}

TEST(FusionPlan, GroupsStayConvex) {
  // a = exp(x); s = amax(a, [1], keepdim); c = a - s; d = exp(c)
  // c cannot join a's group: the path a -> s -> c leaves it and comes back.
  // (With row epilogues c and d join the max's kernel instead: Note [Row
  // epilogues in the graph]; here the pointwise planner alone is tested.)
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  const TensorType row = tensor(DType::Float32, {4, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId a = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "a")[0];
  ValueId a2 = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(a), v(a)}, {out(t)}, "a2")[0];
  ValueId s = b.add_node(NodeKind::Aten, "aten::amax.default",
                         {v(a2), Argument::of_list({Argument::of_int(1)}), Argument::of_bool(true)},
                         {out(row)}, "s")[0];
  ValueId c = b.add_node(NodeKind::Aten, "aten::sub.Tensor", {v(a2), v(s)}, {out(t)}, "c")[0];
  ValueId d = b.add_node(NodeKind::Aten, "aten::exp.default", {v(c)}, {out(t)}, "d")[0];
  b.set_outputs({v(d)});
  Planned p = plan(b, without_row_epilogues());
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(pointwise[1]->nodes, (std::vector<NodeId>{3, 4}));
  // c reads the broadcast row max through strides.
  EXPECT_NE(pointwise[1]->spec.find("strided rank=2"), std::string::npos) << pointwise[1]->spec;
  auto aten = p.groups(KernelKind::AtenSequence);
  ASSERT_EQ(aten.size(), 1u);
  EXPECT_EQ(aten[0]->nodes, (std::vector<NodeId>{2}));
  EXPECT_NE(aten[0]->why.find("a lone reduction"), std::string::npos) << aten[0]->why;
}

// Note [Widening casts ride with their readers]: g = -relu(x) feeds a row
// reduction and, through a cast to f32, the kernel after it. The cast joins
// that kernel, which reads g in bf16; g's kernel stores only g. A narrowing
// cast, and a widening one read by two groups, stay with their producer.
// (The pointwise planner alone: with row epilogues the kernels after the
// reductions are theirs.)
TEST(FusionPlan, WideningCastsMoveToTheirReaders) {
  auto build = [&](DType x_dtype, DType cast_dtype, bool second_reader) {
    GraphBuilder b;
    const TensorType xt = tensor(x_dtype, {4, 8});
    ValueId x = b.add_input(out(xt, "x"));
    ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(x)}, {out(xt)}, "r")[0];
    ValueId g = b.add_node(NodeKind::Aten, "aten::neg.default", {v(r)}, {out(xt)}, "g")[0];
    ValueId s =
        b.add_node(NodeKind::Aten, "aten::amax.default",
                   {v(g), Argument::of_list({Argument::of_int(1)}), Argument::of_bool(true)},
                   {out(tensor(x_dtype, {4, 1}))}, "s")[0];
    const TensorType ct = tensor(cast_dtype, {4, 8});
    ValueId c = b.add_node(NodeKind::Aten, "aten::_to_copy.default",
                           {v(g), Argument::of_dtype(cast_dtype)}, {out(ct)}, "cast")[0];
    ValueId d = b.add_node(NodeKind::Aten, "aten::sub.Tensor", {v(c), v(s)}, {out(ct)}, "d")[0];
    ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(d)}, {out(ct)}, "e")[0];
    std::vector<Argument> outputs = {v(e)};
    if (second_reader) {
      // A reader after another reduction: a third group.
      ValueId t =
          b.add_node(NodeKind::Aten, "aten::amax.default",
                     {v(e), Argument::of_list({Argument::of_int(1)}), Argument::of_bool(true)},
                     {out(tensor(cast_dtype, {4, 1}))}, "t")[0];
      ValueId u = b.add_node(NodeKind::Aten, "aten::sub.Tensor", {v(c), v(t)}, {out(ct)}, "u")[0];
      ValueId w = b.add_node(NodeKind::Aten, "aten::neg.default", {v(u)}, {out(ct)}, "w")[0];
      outputs.push_back(v(w));
    }
    b.set_outputs(outputs);
    return b;
  };
  {
    GraphBuilder b = build(DType::BFloat16, DType::Float32, false);
    Planned p = plan(b, without_row_epilogues());
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
    EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1}));
    EXPECT_EQ(pointwise[1]->nodes, (std::vector<NodeId>{3, 4, 5}));
    EXPECT_EQ(pointwise[0]->get<PointwiseGroup>()->spec.outputs.size(), 1u);  // g only, in bf16
    EXPECT_NE(pointwise[1]->spec.find("in0 bf16"), std::string::npos) << pointwise[1]->spec;
  }
  {
    GraphBuilder b = build(DType::Float32, DType::BFloat16, false);  // narrowing
    Planned p = plan(b, without_row_epilogues());
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
    EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1, 3}));
  }
  {
    GraphBuilder b = build(DType::BFloat16, DType::Float32, true);  // two reader groups
    Planned p = plan(b, without_row_epilogues());
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), 3u) << p.plan.to_string();
    EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1, 3}));
  }
}

TEST(FusionPlan, InterleavedGroupsRunWhenTheirLastNodeCould) {
  // a[4,8] = exp(x); b[8] = exp(y); c = a * b (joins a); d[8] = neg(b)
  // (joins b); e = c + d (joins a): b's group runs first.
  GraphBuilder b;
  const TensorType big = tensor(DType::Float32, {4, 8});
  const TensorType small = tensor(DType::Float32, {8});
  ValueId x = b.add_input(out(big, "x"));
  ValueId y = b.add_input(out(small, "y"));
  ValueId a = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(big)}, "a")[0];
  ValueId bb = b.add_node(NodeKind::Aten, "aten::exp.default", {v(y)}, {out(small)}, "b")[0];
  ValueId c = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(a), v(bb)}, {out(big)}, "c")[0];
  ValueId d = b.add_node(NodeKind::Aten, "aten::neg.default", {v(bb)}, {out(small)}, "d")[0];
  ValueId e = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(c), v(d)}, {out(big)}, "e")[0];
  b.set_outputs({v(e)});
  Planned p = plan(b);  // plan() checks the order is valid
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{1, 3}));
  EXPECT_EQ(pointwise[1]->nodes, (std::vector<NodeId>{0, 2, 4}));
}

// gelu(x + other) over a static [4, width] f32 walk: the spec text of the
// pointwise group.
std::string broadcast_add_spec(std::int64_t width, const std::vector<std::int64_t>& other) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, width});
  ValueId x = b.add_input(out(t, "x"));
  ValueId y = b.add_input(out(tensor(DType::Float32, other), "other"));
  ValueId s = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(x), v(y)}, {out(t)}, "add")[0];
  ValueId g = b.add_node(NodeKind::Aten, "aten::gelu.default", {v(s), Argument::of_string("tanh")},
                         {out(t)}, "gelu")[0];
  b.set_outputs({v(g)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  EXPECT_EQ(pointwise.size(), 1u);
  return pointwise.empty() ? "" : pointwise[0]->spec;
}

// Note [Periodic operands]: a bias over the last dim repeats every row.
TEST(FusionPlan, BroadcastRowsArePeriodic) {
  const std::string spec = broadcast_add_spec(8, {8});
  EXPECT_NE(spec.find("in0 f32 aligned"), std::string::npos) << spec;
  EXPECT_NE(spec.find("in1 f32 periodic\n"), std::string::npos) << spec;
  EXPECT_NE(spec.find("gelu_tanh"), std::string::npos) << spec;
  EXPECT_NE(broadcast_add_spec(8, {1, 8}).find("in1 f32 periodic\n"), std::string::npos);
}

// A [4, 8] operand over a [4, 3, 8] walk repeats within each row of 3 x 8.
TEST(FusionPlan, BroadcastsBetweenDenseDimsArePeriodicRows) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 3, 8});
  ValueId x = b.add_input(out(t, "x"));
  ValueId y = b.add_input(out(tensor(DType::Float32, {4, 1, 8}), "gate"));
  ValueId s = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(x), v(y)}, {out(t)}, "mul")[0];
  ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(s)}, {out(t)}, "relu")[0];
  b.set_outputs({v(r)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u);
  EXPECT_NE(pointwise[0]->spec.find("in1 f32 periodic_rows"), std::string::npos)
      << pointwise[0]->spec;
}

// A column broadcast does not repeat in the walk's order, and a row of 6
// f32 is not a whole number of 4-element vectors: both stay strided.
TEST(FusionPlan, OtherBroadcastInputsAreStrided) {
  std::string spec = broadcast_add_spec(8, {4, 1});
  EXPECT_NE(spec.find("in1 f32 strided rank=2"), std::string::npos) << spec;
  spec = broadcast_add_spec(6, {6});
  EXPECT_NE(spec.find("in1 f32 strided rank=2"), std::string::npos) << spec;
  spec = broadcast_add_spec(8, {1});
  EXPECT_NE(spec.find("in1 f32 strided rank=2"), std::string::npos) << spec;
}

TEST(FusionPlan, TypePromotionIsExplicit) {
  // f16 * f32 -> f32; exp of the f16 input stays in fp32 until stored as f16.
  GraphBuilder b;
  const TensorType h = tensor(DType::Float16, {32});
  const TensorType f = tensor(DType::Float32, {32});
  ValueId x = b.add_input(out(h, "x"));
  ValueId y = b.add_input(out(f, "y"));
  ValueId m = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(x), v(y)}, {out(f)}, "mul")[0];
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(h)}, "exp")[0];
  ValueId a = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(e), v(m)}, {out(f)}, "add")[0];
  ValueId c = b.add_node(NodeKind::Aten, "aten::_to_copy.default",
                         {v(e), Argument::of_dtype(DType::BFloat16)},
                         {out(tensor(DType::BFloat16, {32}))}, "to_bf16")[0];
  b.set_outputs({v(a), v(e), v(c)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
  const std::string& spec = pointwise[0]->spec;
  EXPECT_NE(spec.find("load in0 : f16"), std::string::npos) << spec;
  EXPECT_NE(spec.find("cast %0 : f32"), std::string::npos) << spec;
  EXPECT_NE(spec.find("exp %1 : f32"), std::string::npos) << spec;  // opmath
  EXPECT_NE(spec.find(": f16\n"), std::string::npos) << spec;       // rounded once, for the store
  EXPECT_NE(spec.find("out0 f16 aligned = %6"), std::string::npos) << spec;
  EXPECT_NE(spec.find("out2 bf16"), std::string::npos) << spec;
}

TEST(FusionPlan, ComparisonsPromoteWithScalars) {
  GraphBuilder b;
  const TensorType i = tensor(DType::Int32, {10});
  const TensorType flag = tensor(DType::Bool, {10});
  ValueId x = b.add_input(out(i, "x"));
  ValueId g = b.add_node(NodeKind::Aten, "aten::gt.Scalar", {v(x), Argument::of_float(0.5)},
                         {out(flag)}, "gt")[0];
  ValueId w = b.add_node(NodeKind::Aten, "aten::where.self", {v(g), v(x), Argument::of_int(0)},
                         {out(i)}, "where")[0];
  b.set_outputs({v(w)});
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
  const std::string& spec = pointwise[0]->spec;
  EXPECT_NE(spec.find("gt %1, %2 : b8"), std::string::npos) << spec;
  EXPECT_NE(spec.find("cast %0 : f32"), std::string::npos) << spec;  // int vs float scalar
  EXPECT_NE(spec.find("where"), std::string::npos) << spec;
}

TEST(FusionPlan, CpuPartitionsStayAtenSequences) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4}, "cpu");
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "exp")[0];
  ValueId n = b.add_node(NodeKind::Aten, "aten::neg.default", {v(e)}, {out(t)}, "neg")[0];
  b.set_outputs({v(n)});
  Planned p = plan(b);
  ASSERT_EQ(p.plan.partitions.size(), 1u);
  ASSERT_EQ(p.plan.partitions[0].groups.size(), 1u);
  EXPECT_EQ(p.plan.partitions[0].groups[0].kind(), KernelKind::AtenSequence);
  EXPECT_EQ(p.plan.partitions[0].groups[0].nodes, (std::vector<NodeId>{0, 1}));
}

TEST(FusionPlan, DifferentShapesMakeSeparateGroups) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  const TensorType s = tensor(DType::Float32, {8});
  ValueId x = b.add_input(out(s, "x"));
  ValueId y = b.add_input(out(t, "y"));
  ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(s)}, "exp")[0];
  ValueId n = b.add_node(NodeKind::Aten, "aten::neg.default", {v(e)}, {out(s)}, "neg")[0];
  ValueId a = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(y), v(n)}, {out(t)}, "add")[0];
  ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(a)}, {out(t)}, "relu")[0];
  b.set_outputs({v(r), v(n)});  // neg's value is read outside: not inlined
  Planned p = plan(b);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(pointwise[1]->nodes, (std::vector<NodeId>{2, 3}));
}

// Note [Broadcast producers inlined]: the same chain, its small values read
// only by the add, runs inside the add's kernel, whose iteration space is
// the stored output's [4, 8]; a longer small chain than the cap stays apart.
TEST(FusionPlan, BroadcastProducersJoinTheirReader) {
  for (int small_ops : {2, static_cast<int>(PointwisePlanner::kMaxInlinedNodes) + 1}) {
    GraphBuilder b;
    const TensorType t = tensor(DType::Float32, {4, 8});
    const TensorType s = tensor(DType::Float32, {8});
    ValueId chain = b.add_input(out(s, "x"));
    ValueId y = b.add_input(out(t, "y"));
    for (int k = 0; k < small_ops; ++k)
      chain = b.add_node(NodeKind::Aten, "aten::neg.default", {v(chain)}, {out(s)},
                         "neg" + std::to_string(k))[0];
    ValueId a =
        b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(y), v(chain)}, {out(t)}, "add")[0];
    ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(a)}, {out(t)}, "relu")[0];
    b.set_outputs({v(r)});
    Planned p = plan(b);
    auto pointwise = p.groups(KernelKind::Pointwise);
    const auto all = static_cast<std::size_t>(small_ops + 2);
    if (small_ops <= static_cast<int>(PointwisePlanner::kMaxInlinedNodes)) {
      ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
      EXPECT_EQ(pointwise[0]->nodes.size(), all);
      const PointwiseGroup* group = pointwise[0]->get<PointwiseGroup>();
      EXPECT_EQ(group->spec.rank, 2);  // the stored output's space
      EXPECT_EQ(group->outputs, (std::vector<ValueId>{r}));
    } else {
      ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
    }
  }
}

// Note [Lone reordering copies]: a lone clone of a window-partition view
// (the innermost dim contiguous on both sides) is a generated pointwise
// kernel; a lone clone of a contiguous tensor stays ATen's; a lone clone of
// a transpose (the innermost dim strided in the input) is a tiled copy
// (Note [Tiled transposing copies]).
TEST(FusionPlan, LoneReorderingCopiesAreGenerated) {
  const TensorType dense = tensor(DType::BFloat16, {2, 3, 4, 8});
  TensorType windows = dense;  // [2, 3, 4, 8] read from a [2, 4, 3, 8] tensor
  windows.strides = {Dim(96), Dim(8), Dim(24), Dim(1)};
  TensorType transposed = dense;  // the last two dims swapped in memory
  transposed.strides = {Dim(96), Dim(32), Dim(1), Dim(4)};
  for (const auto& [input, generated] : std::vector<std::pair<TensorType, bool>>{
           {windows, true}, {dense, false}, {transposed, false}}) {
    GraphBuilder b;
    ValueId x = b.add_input(out(input, "x"));
    ValueId y = node1(b, "aten::clone.default", {v(x)}, dense, "clone");
    b.set_outputs({v(y)});
    Planned p = plan(b);
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), generated ? 1u : 0u) << p.plan.to_string();
    EXPECT_EQ(p.groups(KernelKind::Transpose).size(),
              input.strides[3].static_value() == 4 ? 1u : 0u)
        << p.plan.to_string();
    if (generated) {
      EXPECT_NE(pointwise[0]->spec.find("in0 bf16 strided"), std::string::npos)
          << pointwise[0]->spec;
      EXPECT_NE(pointwise[0]->spec.find("out0 bf16 aligned"), std::string::npos)
          << pointwise[0]->spec;
    }
  }
}

// Note [Lone broadcasting ops]: a lone op that broadcasts an input (a gate
// [2, 8, 1, 1] over channels-last [2, 8, 4, 4] activations) is generated,
// its gate periodic in rows; the same op on two operands laid out like its
// output stays ATen's (vectorized there), as does one whose output has a
// single element.
TEST(FusionPlan, LoneBroadcastingOpsAreGenerated) {
  TensorType activations = tensor(DType::BFloat16, {2, 8, 4, 4});
  activations.strides = {Dim(128), Dim(1), Dim(32), Dim(8)};  // channels-last
  const TensorType gate = tensor(DType::BFloat16, {2, 8, 1, 1});
  const TensorType scalar = tensor(DType::BFloat16, {1});
  const std::vector<std::pair<TensorType, TensorType>> cases = {
      {activations, gate}, {activations, activations}, {scalar, scalar}};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    GraphBuilder b;
    const auto& [big, small] = cases[k];
    ValueId x = b.add_input(out(big, "x"));
    ValueId g = b.add_input(out(small, "gate"));
    ValueId y = node1(b, "aten::mul.Tensor", {v(x), v(g)}, big, "mul");
    b.set_outputs({v(y)});
    Planned p = plan(b);
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), k == 0 ? 1u : 0u) << p.plan.to_string();
    if (k == 0) {
      EXPECT_NE(pointwise[0]->spec.find("in1 bf16 periodic_rows"), std::string::npos)
          << pointwise[0]->spec;
    }
  }
}

// Note [Fills as literals]: where(mask, x, full_like(x, -inf)) is one
// kernel reading x and the mask, the fill a literal; a fill read by nothing
// else in a group (its readers all ATen) stays ATen's, and so does a group
// of fills only.
TEST(FusionPlan, FillsAreLiteralsOfTheirReaders) {
  const TensorType t = tensor(DType::BFloat16, {4, 8});
  const TensorType mask_type = tensor(DType::Bool, {4, 8});
  const double inf = std::numeric_limits<double>::infinity();
  for (const char* op : {"aten::full_like.default", "aten::zeros_like.default"}) {
    GraphBuilder b;
    ValueId x = b.add_input(out(t, "x"));
    ValueId mask = b.add_input(out(mask_type, "mask"));
    const bool full = std::string(op) == "aten::full_like.default";
    std::vector<Argument> args = {v(x)};
    if (full) args.push_back(Argument::of_float(-inf));
    ValueId fill = node1(b, op, args, t, "fill");
    ValueId y = node1(b, "aten::where.self", {v(mask), v(x), v(fill)}, t, "where");
    b.set_outputs({v(y)});
    Planned p = plan(b);
    auto pointwise = p.groups(KernelKind::Pointwise);
    ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
    EXPECT_EQ(pointwise[0]->nodes.size(), 2u);
    EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();
    const PointwiseGroup& g = *pointwise[0]->get<PointwiseGroup>();
    EXPECT_EQ(g.inputs, (std::vector<ValueId>{mask, x}));  // no fill loaded
    EXPECT_NE(pointwise[0]->spec.find(full ? "-inf" : "0"), std::string::npos)
        << pointwise[0]->spec;
  }
  GraphBuilder b;
  ValueId x = b.add_input(out(t, "x"));
  ValueId fill = node1(b, "aten::ones_like.default", {v(x)}, t, "ones");
  ValueId twice = node1(b, "aten::mul.Tensor", {v(fill), Argument::of_float(2.0)}, t, "twice");
  b.set_outputs({v(twice)});
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_NE(all_whys(p).find("reads no tensor"), std::string::npos) << all_whys(p);
}

// Note [Sibling groups in one launch]: the per-head copies of a fused
// [B, N, 3, D] projection, the query's scaled, are one kernel; a group that
// waits for one of them (through an ATen op), or that reads another tensor,
// stays apart.
TEST(FusionPlan, SiblingGroupsShareOneLaunch) {
  const TensorType qkv = tensor(DType::BFloat16, {2, 4, 3, 8});
  TensorType head = tensor(DType::BFloat16, {2, 4, 8});  // one third of each row
  head.strides = {Dim(96), Dim(24), Dim(1)};
  const TensorType dense = tensor(DType::BFloat16, {2, 4, 8});
  GraphBuilder b;
  ValueId x = b.add_input(out(qkv, "qkv"));
  ValueId other = b.add_input(out(qkv, "other"));
  auto select = [&](ValueId from, int k, const std::string& name) {
    return b.add_node(NodeKind::Aten, "aten::select.int",
                      {v(from), Argument::of_int(2), Argument::of_int(k)}, {out(head)}, name)[0];
  };
  std::vector<ValueId> copies;
  for (int k = 0; k < 3; ++k) {
    const std::string name = "head" + std::to_string(k);
    ValueId h = select(x, k, name + "_view");
    if (k == 0) {
      h = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(h), Argument::of_float(0.5)},
                     {out(head)}, "scaled")[0];
    }
    copies.push_back(node1(b, "aten::clone.default", {v(h)}, dense, (name + "_copy").c_str()));
  }
  ValueId flipped = node1(b, "aten::flip.default", {v(copies[1]), ints({1})}, dense, "flipped");
  ValueId dependent =
      node1(b, "aten::mul.Tensor", {v(select(x, 2, "again_view")), v(flipped)}, dense, "dependent");
  ValueId unrelated =
      node1(b, "aten::clone.default", {v(select(other, 0, "other_view"))}, dense, "unrelated");
  b.set_outputs({v(copies[0]), v(copies[2]), v(dependent), v(unrelated)});
  Planned p = plan(b);
  auto names = [&](const KernelGroup& g) {
    std::vector<std::string> out;
    for (NodeId n : g.nodes) out.push_back(p.graph.node(n).name);
    return out;
  };
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 3u) << p.plan.to_string();
  EXPECT_EQ(names(*pointwise[0]),
            (std::vector<std::string>{"scaled", "head0_copy", "head1_copy", "head2_copy"}))
      << p.plan.to_string();
  const auto* group = pointwise[0]->get<PointwiseGroup>();
  EXPECT_EQ(group->outputs, (std::vector<ValueId>{copies[0], copies[1], copies[2]}));
  EXPECT_EQ(group->spec.inputs.size(), 3u) << pointwise[0]->spec;
  EXPECT_EQ(names(*pointwise[1]), (std::vector<std::string>{"dependent"}));
  EXPECT_EQ(names(*pointwise[2]), (std::vector<std::string>{"unrelated"}));
}

TEST(TypePromotion, MatchesTorch) {
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promote_types(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int8), DType::Int8);
  using K = PromotionOperand::Kind;
  // int tensor and a float scalar: default float.
  EXPECT_EQ(result_type({{K::DimTensor, DType::Int32}, {K::Scalar, DType::Float64}}),
            DType::Float32);
  // f16 tensor and a float scalar: f16.
  EXPECT_EQ(result_type({{K::DimTensor, DType::Float16}, {K::Scalar, DType::Float64}}),
            DType::Float16);
  // f16 tensor and an f32 zero-dim tensor: f16 (same category).
  EXPECT_EQ(result_type({{K::DimTensor, DType::Float16}, {K::ZeroDimTensor, DType::Float32}}),
            DType::Float16);
  // int tensor and a zero-dim float tensor: the zero-dim's dtype.
  EXPECT_EQ(result_type({{K::DimTensor, DType::Int64}, {K::ZeroDimTensor, DType::Float64}}),
            DType::Float64);
}

TEST(PointwiseLowering, TableCoversTheCoreOps) {
  for (const char* op :
       {"aten::add.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::sub.Tensor",
        "aten::neg.default", "aten::exp.default", "aten::relu.default", "aten::gelu.default",
        "aten::sigmoid.default", "aten::tanh.default", "aten::where.self", "aten::lt.Scalar",
        "aten::_to_copy.default", "prims::convert_element_type.default", "aten::clone.default"}) {
    EXPECT_TRUE(has_pointwise_lowering(op)) << op;
  }
}

}  // namespace
}  // namespace mybackend
