// Stage 7: reduction and norm groups (reduction_planner.h) on hand-built IR
// graphs: which nodes each group takes, prologue/epilogue membership, what
// stays ATen and why, and that groups never form a cycle.
#include <gtest/gtest.h>

#include <algorithm>

#include "fusion/prologue.h"
#include "fusion/reduction_planner.h"
#include "fusion/row_epilogue.h"
#include "reduction_graphs.h"

namespace mybackend {
namespace {

TEST(ReductionPlanner, SumTakesItsPrologueAndEpilogue) {
  GraphBuilder b;
  sum_with_prologue_and_epilogue(b, DType::Float32, {4, 8}, {1}, false);
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty());
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(r.spec.axis, ReduceAxis::Inner);
  EXPECT_EQ(r.spec.op, ReduceOp::Sum);
  EXPECT_EQ(r.reduce_begin, 1);
  EXPECT_EQ(r.reduce_end, 2);
  EXPECT_EQ(r.inputs, (std::vector<ValueId>{0}));  // the prologue reads x only
  EXPECT_EQ(r.outputs.size(), 1u);                 // only sqrt leaves the group
  EXPECT_NE(groups[0]->why.find("2 prologue and 2 epilogue"), std::string::npos) << groups[0]->why;
  EXPECT_NE(r.spec.prologue->to_string().find("exp"), std::string::npos);
  EXPECT_NE(r.spec.epilogue->to_string().find("sqrt"), std::string::npos);
  EXPECT_NE(r.general.to_string().find("index=i64"), std::string::npos);
}

TEST(ReductionPlanner, LeadingDimsReduceAsOuter) {
  GraphBuilder b;
  sum_with_prologue_and_epilogue(b, DType::BFloat16, {8, 16, 3}, {0, 1}, true);
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.axis, ReduceAxis::Outer);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->reduce_begin, 0);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->reduce_end, 2);
}

// silu(x * scale[C, 1, 1]) reduced over `dims` of a channels-last x
// [2, 8, 4, 4]; scale is rsqrt(var), read broadcast.
Planned channels_last_reduction(std::vector<std::int64_t> dims, bool keepdim,
                                std::vector<std::int64_t> out_sizes) {
  GraphBuilder b;
  const TensorType x_type = nchw(DType::Float32, {2, 8, 4, 4}, true);
  const TensorType c_type = tensor(DType::Float32, {8, 1, 1});
  ValueId x = b.add_input(out(x_type, "x"));
  ValueId var = b.add_input(out(c_type, "var"));
  ValueId scale = node1(b, "aten::rsqrt.default", {v(var)}, c_type, "rsqrt");
  ValueId m = node1(b, "aten::mul.Tensor", {v(x), v(scale)}, x_type, "mul");
  ValueId y = node1(b, "aten::silu.default", {v(m)}, x_type, "silu");
  TensorType r = tensor(DType::Float32, out_sizes);
  if (keepdim) r = nchw(DType::Float32, out_sizes, true);
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(y), ints(dims), Argument::of_bool(keepdim), Argument::none()}, r, "sum");
  b.set_outputs({v(s)});
  return plan(b);
}

TEST(ReductionPlanner, ChannelsLastMeansWalkMemoryOrder) {
  // Note [Reductions walked in memory order]: over H, W the walk is
  // [N, H, W, C], a column reduction of dense rows.
  Planned p = channels_last_reduction({2, 3}, true, {2, 8, 1, 1});
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(r.in_order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(r.out_order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(r.reduce_begin, 1);
  EXPECT_EQ(r.reduce_end, 3);
  EXPECT_EQ(r.spec.axis, ReduceAxis::Outer);
  // x is dense in the walk; the per-channel scale repeats every C elements
  // of it (Note [Periodic operands in reductions]), in the fast variant.
  ASSERT_EQ(r.inputs.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const IndexMode expected = r.inputs[k] == 0 ? IndexMode::Aligned : IndexMode::Periodic;
    EXPECT_EQ(r.spec.prologue->inputs[k].mode, expected) << r.spec.to_string();
    EXPECT_EQ(r.general.prologue->inputs[k].mode, IndexMode::Strided) << r.general.to_string();
  }
  // mul and silu are the prologue; rsqrt, of another shape, is not.
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{1, 2, 3}));
}

TEST(ReductionPlanner, DimsApartLogicallyAreOneRangeInMemory) {
  // A channels-last batch norm's sums over (N, H, W): [N * H * W, C] in memory.
  Planned p = channels_last_reduction({0, 2, 3}, false, {8});
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(r.in_order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(r.out_order, (std::vector<int>{0}));
  EXPECT_EQ(r.reduce_begin, 0);
  EXPECT_EQ(r.reduce_end, 3);
  EXPECT_EQ(r.spec.axis, ReduceAxis::Outer);
}

TEST(ReductionPlanner, ChannelSumsOfChannelsLastAreRows) {
  Planned p = channels_last_reduction({1}, false, {2, 4, 4});
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(r.out_order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.reduce_begin, 3);
  EXPECT_EQ(r.reduce_end, 4);
  EXPECT_EQ(r.spec.axis, ReduceAxis::Inner);
}

TEST(ReductionPlanner, ScatteredDimsStayAten) {
  GraphBuilder b;
  sum_with_prologue_and_epilogue(b, DType::Float32, {4, 5, 6}, {0, 2}, false);
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Reduction).empty());
  EXPECT_NE(all_whys(p).find("one contiguous range in neither logical nor memory order"),
            std::string::npos)
      << all_whys(p);
}

TEST(ReductionPlanner, SharedProducersAreNotPrologue) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  const TensorType r = tensor(DType::Float32, {4});
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = node1(b, "aten::exp.default", {v(x)}, t, "exp");
  ValueId s =
      node1(b, "aten::amax.default", {v(e), ints({1}), Argument::of_bool(false)}, r, "amax");
  b.set_outputs({v(e), v(s)});  // exp is read outside: no prologue, no epilogue
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Reduction).empty());
  EXPECT_NE(all_whys(p).find("a lone reduction"), std::string::npos) << all_whys(p);
}

TEST(ReductionPlanner, EpilogueStaysConvex) {
  // add(r, t) must not join: t depends on r through a node outside the group.
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  const TensorType r = tensor(DType::Float32, {4, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(3.0)}, t, "mul");
  ValueId s = node1(b, "aten::var.correction",
                    {v(m), ints({1}), Argument::of_int(0), Argument::of_bool(true)}, r, "var");
  ValueId c =
      node1(b, "aten::cumsum.default", {v(s), Argument::of_int(0), Argument::none()}, r, "cumsum");
  ValueId a = node1(b, "aten::add.Tensor", {v(s), v(c), Argument::of_int(1)}, r, "add");
  b.set_outputs({v(a)});
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.op, ReduceOp::Var);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.correction, 0.0);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->outputs, (std::vector<ValueId>{s}));
}

Planned epilogue_with_operand_producers(int chain, bool read_elsewhere) {
  GraphBuilder b;
  sum_times_reduced_operand(b, DType::Float32, chain, read_elsewhere);
  return plan(b);
}

TEST(ReductionPlanner, EpilogueRecomputesItsOperandsProducers) {
  // Note [Epilogue operands recomputed]: pow(rstd, 3) is computed in the
  // reduction's kernel, not launched alone.
  Planned p = epilogue_with_operand_producers(1, false);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3}));
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  const ReductionGroup& g = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(g.outputs.size(), 1u);          // the pow's result is not stored
  EXPECT_EQ(g.epilogue_inputs.size(), 2u);  // the sum, and rstd
}

TEST(ReductionPlanner, AnOperandProducerReadElsewhereStaysApart) {
  Planned p = epilogue_with_operand_producers(1, true);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 3}));
}

TEST(ReductionPlanner, OperandProducersAreFew) {
  // A chain of six: the kMaxOperandProducers nearest the epilogue join.
  Planned p = epilogue_with_operand_producers(6, false);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes.size(), 3 + kMaxOperandProducers) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes.back(), 8);  // the epilogue's mul
  EXPECT_EQ(groups[0]->nodes[2], 8 - static_cast<NodeId>(kMaxOperandProducers));
}

// Note [Row epilogues in the graph]: the RMS norm's input gradient reads
// the row sum broadcast back over the rows; it joins the sum's kernel.
TEST(ReductionPlanner, RowEpilogueTakesTheRowsBroadcastReaders) {
  GraphBuilder b;
  rms_norm_backward_rows(b, DType::BFloat16);
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  // Everything but the upcast of dy, which the weight gradient reads too;
  // five operand producers (through, direct, pow1, twice, gw) recomputed.
  EXPECT_EQ(groups[0]->nodes.size(), 15u) << p.plan.to_string();
  ASSERT_TRUE(r.spec.row_epilogue.has_value());
  EXPECT_EQ(r.spec.axis, ReduceAxis::Inner);
  EXPECT_TRUE(r.outputs.empty());  // the scaled sum only feeds the rows
  EXPECT_EQ(r.spec.stored_outputs(), 0u);
  // Row values: the scaled sum, and rstd (one value a row, read by
  // g * w * rstd), which the epilogue loads once a row.
  EXPECT_EQ(r.spec.unstored_outputs, 2);
  EXPECT_EQ(r.spec.row_values, (std::vector<std::int32_t>{0, 1}));
  const ValueId rstd = 2;
  EXPECT_NE(std::find(r.epilogue_inputs.begin(), r.epilogue_inputs.end(), rstd),
            r.epilogue_inputs.end());
  EXPECT_EQ(std::find(r.row_inputs.begin(), r.row_inputs.end(), rstd), r.row_inputs.end());
  ASSERT_EQ(r.row_outputs.size(), 2u);  // the fp32 gradient and its cast
  EXPECT_EQ(p.graph.node(p.graph.value(r.row_outputs[1]).producer).name, "down");
  EXPECT_EQ(r.row_inputs[0], -1);  // row values, in registers
  EXPECT_EQ(r.row_inputs[1], -1);
  EXPECT_EQ(r.spec.row_epilogue->outputs[0].tensor.mode, IndexMode::Aligned);
  EXPECT_NE(groups[0]->why.find("row epilogue of"), std::string::npos) << groups[0]->why;
  // gw = g * w is computed in both passes, never stored.
  EXPECT_NE(r.spec.prologue->to_string().find("mul"), std::string::npos);
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).size() <= 1u) << p.plan.to_string();
  EXPECT_NE(r.spec.to_string().find("row epilogue"), std::string::npos);
}

TEST(ReductionPlanner, RowEpiloguesSwitchOff) {
  GraphBuilder b;
  rms_norm_backward_rows(b, DType::BFloat16);
  Planned p = plan(b, without_row_epilogues());
  for (const KernelGroup* g : p.groups(KernelKind::Reduction))
    EXPECT_FALSE(g->get<ReductionGroup>()->spec.row_epilogue.has_value()) << p.plan.to_string();
  EXPECT_FALSE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
}

TEST(ReductionPlanner, ABroadcastReadOutsideKeepsTheRowsApart) {
  // The expand of the row max is also returned: the kernel would not make
  // it, so the max keeps its readers apart and says why.
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {8, 32});
  ValueId x = b.add_input(out(t, "x"));
  ValueId m = node1(b, "aten::amax.default", {v(x), ints({1}), Argument::of_bool(true)},
                    tensor(DType::Float32, {8, 1}), "max");
  ValueId e =
      node1(b, "aten::expand.default",
            {v(m), Argument::of_list({Argument::of_int(8), Argument::of_int(32)})}, t, "expand");
  ValueId d = node1(b, "aten::sub.Tensor", {v(x), v(e), Argument::of_int(1)}, t, "sub");
  ValueId q = node1(b, "aten::exp.default", {v(d)}, t, "exp");
  b.set_outputs({v(q), v(e)});
  Planned p = plan(b);
  for (const KernelGroup* g : p.groups(KernelKind::Reduction))
    EXPECT_FALSE(g->get<ReductionGroup>()->spec.row_epilogue.has_value()) << p.plan.to_string();
  EXPECT_NE(all_whys(p).find("is read outside"), std::string::npos) << all_whys(p);
}

TEST(ReductionPlanner, LongRowsKeepTheirBroadcastReadersApart) {
  GraphBuilder b;
  rms_norm_backward_rows(b, DType::Float32, kMaxRowEpilogueLength * 2);
  Planned p = plan(b);
  for (const KernelGroup* g : p.groups(KernelKind::Reduction))
    EXPECT_FALSE(g->get<ReductionGroup>()->spec.row_epilogue.has_value()) << p.plan.to_string();
  EXPECT_FALSE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
}

TEST(ReductionPlanner, ColumnReductionsTakeNoRowEpilogue) {
  GraphBuilder b;
  rms_norm_backward_rows(b, DType::Float32, 64, /*reduced_dim=*/1);
  Planned p = plan(b);
  for (const KernelGroup* g : p.groups(KernelKind::Reduction))
    EXPECT_FALSE(g->get<ReductionGroup>()->spec.row_epilogue.has_value()) << p.plan.to_string();
}

TEST(ReductionPlanner, RowEpilogueKeepsAReadRowValueStored) {
  // x / sum(x, -1, keepdim) with the sum returned too: stored, and read by
  // the rows from registers.
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {8, 32});
  const TensorType r = tensor(DType::Float32, {8, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = node1(b, "aten::exp.default", {v(x)}, t, "exp");
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(e), ints({1}), Argument::of_bool(true), Argument::none()}, r, "sum");
  ValueId q = node1(b, "aten::div.Tensor", {v(e), v(s)}, t, "div");
  b.set_outputs({v(q), v(s)});
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& g = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  ASSERT_TRUE(g.spec.row_epilogue.has_value());
  EXPECT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.spec.unstored_outputs, 0);
  EXPECT_EQ(g.spec.strategy, ReduceStrategy::WarpPerRow);
  // exp is recomputed by the rows: one input, x.
  EXPECT_EQ(g.row_inputs, (std::vector<ValueId>{-1, x}));
}

TEST(ReductionPlanner, OneValueARowIsReadAtItsRow) {
  // Note [One value a row]: rstd [4, 6, 1] over the column sum's walk
  // [4, 6, 64] is periodic with period 1 and rows, not strided.
  GraphBuilder b;
  column_sum_of_scaled_rows(b, DType::Float32);
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const ReductionGroup& r = *groups[0]->get<ReductionGroup>();
  EXPECT_EQ(r.spec.axis, ReduceAxis::Outer);
  ASSERT_EQ(r.inputs.size(), 3u);
  const auto rstd = std::find(r.inputs.begin(), r.inputs.end(), ValueId{2}) - r.inputs.begin();
  ASSERT_LT(rstd, 3);
  EXPECT_EQ(r.spec.prologue->inputs[static_cast<std::size_t>(rstd)].mode, IndexMode::PeriodicRows)
      << r.spec.to_string();
  EXPECT_EQ(r.general.prologue->inputs[static_cast<std::size_t>(rstd)].mode, IndexMode::Strided);
}

TEST(ReductionPlanner, ClaimedGroupsAreOneUnitForThePointwisePlanner) {
  // a1 -> epilogue -> cumsum -> a2 and a1 -> a2: merging a1 and a2 would
  // make a cycle through the reduction group.
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 8});
  const TensorType r = tensor(DType::Float32, {4});
  ValueId x = b.add_input(out(t, "x"));
  ValueId z = b.add_input(out(r, "z"));
  ValueId a1 = node1(b, "aten::exp.default", {v(z)}, r, "a1");
  ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(2.0)}, t, "mul");
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(m), ints({1}), Argument::of_bool(false), Argument::none()}, r, "sum");
  ValueId e = node1(b, "aten::add.Tensor", {v(s), v(a1), Argument::of_int(1)}, r, "epi");
  ValueId c =
      node1(b, "aten::cumsum.default", {v(e), Argument::of_int(0), Argument::none()}, r, "cumsum");
  ValueId a2 = node1(b, "aten::mul.Tensor", {v(a1), v(c)}, r, "a2");
  ValueId a3 = node1(b, "aten::neg.default", {v(a2)}, r, "a3");
  b.set_outputs({v(a3)});
  Planned p = plan(b);  // checks the order is valid
  auto reductions = p.groups(KernelKind::Reduction);
  ASSERT_EQ(reductions.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(reductions[0]->nodes, (std::vector<NodeId>{1, 2, 3}));
  for (const KernelGroup* g : p.groups(KernelKind::Pointwise)) {
    EXPECT_EQ(std::count(g->nodes.begin(), g->nodes.end(), 0), 0) << p.plan.to_string();
  }
}

TEST(ReductionPlanner, ArgmaxWithPrologue) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float16, {3, 7, 5});
  const TensorType r = tensor(DType::Int64, {3, 5});
  ValueId x = b.add_input(out(t, "x"));
  ValueId n = node1(b, "aten::neg.default", {v(x)}, t, "neg");
  ValueId a = node1(b, "aten::argmax.default",
                    {v(n), Argument::of_int(1), Argument::of_bool(false)}, r, "argmax");
  b.set_outputs({v(a)});
  Planned p = plan(b);
  auto groups = p.groups(KernelKind::Reduction);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.op, ReduceOp::Argmax);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.axis, ReduceAxis::Outer);
  EXPECT_EQ(groups[0]->get<ReductionGroup>()->spec.out_dtype, DType::Int64);
}

TEST(NormPlanner, SoftmaxForwardAndBackwardAreNormGroups) {
  GraphBuilder b;
  softmax(b, DType::BFloat16, -1, false);
  Planned p = plan(b);
  auto norms = p.groups(KernelKind::Norm);
  ASSERT_EQ(norms.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(norms[0]->get<NormGroup>()->spec.kind, NormKind::SoftmaxForward);
  EXPECT_EQ(norms[1]->get<NormGroup>()->spec.kind, NormKind::SoftmaxBackward);
  EXPECT_TRUE(norms[0]->get<NormGroup>()->spec.aligned);
  EXPECT_FALSE(norms[0]->get<NormGroup>()->general.aligned);
}

TEST(NormPlanner, SoftmaxOverAnotherDimStaysAten) {
  GraphBuilder b;
  softmax(b, DType::Float32, 0, true);
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Norm).empty());
  EXPECT_NE(all_whys(p).find("not the last one"), std::string::npos) << all_whys(p);
}

TEST(NormPlanner, LayerNormForwardAndBackward) {
  GraphBuilder b;
  layer_norm(b, DType::BFloat16);
  Planned p = plan(b);
  auto norms = p.groups(KernelKind::Norm);
  ASSERT_EQ(norms.size(), 2u) << p.plan.to_string();
  const NormGroup& fw = *norms[0]->get<NormGroup>();
  EXPECT_EQ(fw.spec.kind, NormKind::LayerNormForward);
  EXPECT_TRUE(fw.spec.has_weight && fw.spec.has_bias && fw.spec.save_stats);
  EXPECT_EQ(fw.outputs.size(), 3u);
  EXPECT_DOUBLE_EQ(fw.eps, 1e-5);
  const NormGroup& bw = *norms[1]->get<NormGroup>();
  EXPECT_EQ(bw.spec.kind, NormKind::LayerNormBackward);
  EXPECT_TRUE(bw.spec.param_grads);
  EXPECT_EQ(bw.outputs.size(), 3u);  // grad_in, grad_weight, grad_bias
}

// The one norm group of layer_norm_backward_then_residual's plan.
const KernelGroup* residual_norm(const Planned& p) {
  auto norms = p.groups(KernelKind::Norm);
  EXPECT_EQ(norms.size(), 1u) << p.plan.to_string();
  return norms.size() == 1 ? norms[0] : nullptr;
}

TEST(NormPlanner, LayerNormBackwardTakesTheResidualSumAsEpilogue) {
  GraphBuilder b;
  layer_norm_backward_then_residual(b, /*dx_returned=*/false, /*broadcast_residual=*/false);
  Planned p = plan(b);
  const KernelGroup* norm = residual_norm(p);
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->nodes, (std::vector<NodeId>{0, 1, 2})) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  const NormGroup& g = *norm->get<NormGroup>();
  ASSERT_TRUE(g.spec.epilogue.has_value());
  ASSERT_TRUE(g.general.epilogue.has_value());
  std::vector<std::string> outputs;
  for (const auto& [name, value] : g.outputs) outputs.push_back(name);
  // grad_in is not stored: only the sum and its cast are.
  EXPECT_EQ(outputs, (std::vector<std::string>{"grad_weight", "grad_bias", "eout0", "eout1"}));
  EXPECT_EQ(g.spec.epilogue->outputs.at(1).tensor.dtype, DType::BFloat16);
  EXPECT_EQ(g.inputs.back(), (std::pair<std::string, ValueId>{"ein1", 6}));  // r
  EXPECT_NE(norm->why.find("with 2 epilogue elementwise ops"), std::string::npos) << norm->why;
}

TEST(NormPlanner, AGradInReadElsewhereIsStoredToo) {
  GraphBuilder b;
  layer_norm_backward_then_residual(b, /*dx_returned=*/true, /*broadcast_residual=*/false);
  Planned p = plan(b);
  const KernelGroup* norm = residual_norm(p);
  ASSERT_NE(norm, nullptr);
  const NormGroup& g = *norm->get<NormGroup>();
  ASSERT_TRUE(g.spec.epilogue.has_value());
  EXPECT_EQ(g.spec.epilogue->outputs.size(), 3u);  // grad_in, the sum, its cast
  EXPECT_EQ(g.outputs.back().first, "eout2");
}

TEST(NormPlanner, ABroadcastResidualKeepsTheSumApart) {
  GraphBuilder b;
  layer_norm_backward_then_residual(b, /*dx_returned=*/false, /*broadcast_residual=*/true);
  Planned p = plan(b);
  const KernelGroup* norm = residual_norm(p);
  ASSERT_NE(norm, nullptr);
  EXPECT_FALSE(norm->get<NormGroup>()->spec.epilogue.has_value());
  EXPECT_NE(norm->why.find("epilogue not taken"), std::string::npos) << norm->why;
  EXPECT_EQ(p.groups(KernelKind::Pointwise).size(), 1u) << p.plan.to_string();
}

// The plan of elementwise_then_layer_norm (bf16); `norm`: its one norm
// group, or null (a failed expectation) when there is not exactly one.
struct PlannedNorm {
  Planned planned;
  const KernelGroup* norm = nullptr;
};
void plan_elementwise_then_layer_norm(bool also_output, bool broadcast, PlannedNorm* out) {
  GraphBuilder b;
  elementwise_then_layer_norm(b, DType::BFloat16, also_output, broadcast);
  out->planned = plan(b);
  auto norms = out->planned.groups(KernelKind::Norm);
  EXPECT_EQ(norms.size(), 1u) << out->planned.plan.to_string();
  if (norms.size() == 1) out->norm = norms[0];
}

TEST(NormPlanner, LayerNormTakesItsElementwisePrologue) {
  PlannedNorm planned;
  plan_elementwise_then_layer_norm(false, false, &planned);
  ASSERT_NE(planned.norm, nullptr);
  const Planned& p = planned.planned;
  const std::vector<const KernelGroup*> norms = {planned.norm};
  EXPECT_EQ(norms[0]->nodes, (std::vector<NodeId>{0, 1})) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  const NormGroup& g = *norms[0]->get<NormGroup>();
  ASSERT_TRUE(g.spec.prologue.has_value());
  ASSERT_TRUE(g.general.prologue.has_value());
  EXPECT_NE(g.spec.prologue->to_string().find("gelu_erf"), std::string::npos) << g.spec.to_string();
  std::vector<std::string> names;
  for (const auto& [name, value] : g.inputs) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "in0"}));
  EXPECT_EQ(g.inputs.back().second, 0);  // the graph input x, read through gelu
  EXPECT_FALSE(g.spec.save_stats);
  EXPECT_NE(norms[0]->why.find("with 1 prologue elementwise op"), std::string::npos)
      << norms[0]->why;
}

// Note [A norm prologue read elsewhere]: x's producer, also a graph output,
// joins alone and the kernel stores x.
TEST(NormPlanner, AProducerReadElsewhereJoinsAndItsResultIsStored) {
  PlannedNorm planned;
  plan_elementwise_then_layer_norm(true, false, &planned);
  ASSERT_NE(planned.norm, nullptr);
  const NormGroup& g = *planned.norm->get<NormGroup>();
  ASSERT_TRUE(g.spec.prologue.has_value());
  EXPECT_TRUE(g.spec.store_x && g.general.store_x);
  EXPECT_EQ(validate(g.spec), "");
  EXPECT_EQ(planned.norm->nodes, (std::vector<NodeId>{0, 1}));
  const auto xout = std::find_if(g.outputs.begin(), g.outputs.end(),
                                 [](const auto& o) { return o.first == "xout"; });
  ASSERT_NE(xout, g.outputs.end());
  EXPECT_EQ(xout->second, planned.planned.graph.outputs().at(1).value) << planned.norm->why;
  EXPECT_NE(planned.norm->why.find("also stored"), std::string::npos) << planned.norm->why;
  EXPECT_TRUE(planned.planned.groups(KernelKind::Pointwise).empty());
}

TEST(NormPlanner, ABroadcastReadKeepsTheProducerApart) {
  PlannedNorm planned;
  plan_elementwise_then_layer_norm(false, true, &planned);
  ASSERT_NE(planned.norm, nullptr);
  const KernelGroup& norm = *planned.norm;
  EXPECT_FALSE(norm.get<NormGroup>()->spec.prologue.has_value());
  EXPECT_NE(norm.why.find("prologue not taken"), std::string::npos) << norm.why;
  EXPECT_NE(norm.why.find("broadcast"), std::string::npos) << norm.why;
  const Planned& p = planned.planned;
  EXPECT_EQ(p.groups(KernelKind::Pointwise).size() + p.groups(KernelKind::AtenSequence).size(), 1u)
      << p.plan.to_string();
}

TEST(NormPlanner, SoftmaxTakesABroadcastAddAsItsPrologue) {
  GraphBuilder b;
  scores_plus_bias_then_softmax(b);
  const Planned p = plan(b);
  const auto norms = p.groups(KernelKind::Norm);
  ASSERT_EQ(norms.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(norms[0]->nodes, (std::vector<NodeId>{0, 1})) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();
  const NormGroup& g = *norms[0]->get<NormGroup>();
  ASSERT_TRUE(g.spec.prologue.has_value());
  ASSERT_EQ(g.spec.prologue->inputs.size(), 2u) << g.spec.to_string();
  // The scores are dense; the bias is read by its strides over x's rank.
  EXPECT_EQ(g.spec.prologue->inputs[0].mode, IndexMode::Contiguous);
  EXPECT_EQ(g.spec.prologue->inputs[1].mode, IndexMode::Strided);
  EXPECT_EQ(g.spec.prologue->inputs[1].rank, 4);
  EXPECT_EQ(validate(g.spec), "");
  std::vector<std::string> names;
  for (const auto& [name, value] : g.inputs) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in0", "in1"}));
  EXPECT_NE(norms[0]->why.find("with 1 prologue elementwise op"), std::string::npos)
      << norms[0]->why;
}

// Note [A norm prologue read elsewhere] through a shape view: the kernel
// stores whichever of the sum and its view is read outside.
TEST(NormPlanner, AProducerReadThroughAViewIsStoredAsItsReadersSeeIt) {
  for (bool view_returned : {false, true}) {
    GraphBuilder b;
    residual_sum_viewed_then_layer_norm(b, view_returned);
    const Planned planned = plan(b);
    const auto norms = planned.groups(KernelKind::Norm);
    ASSERT_EQ(norms.size(), 1u) << planned.plan.to_string();
    EXPECT_EQ(norms[0]->nodes, (std::vector<NodeId>{0, 1, 2})) << planned.plan.to_string();
    const NormGroup& g = *norms[0]->get<NormGroup>();
    EXPECT_TRUE(g.spec.store_x);
    const ValueId stored = planned.graph.node(view_returned ? 1 : 0).outputs[0];
    EXPECT_NE(std::find(g.outputs.begin(), g.outputs.end(),
                        std::pair<std::string, ValueId>{"xout", stored}),
              g.outputs.end())
        << view_returned;
    EXPECT_TRUE(planned.groups(KernelKind::Pointwise).empty()) << planned.plan.to_string();
    EXPECT_TRUE(planned.groups(KernelKind::AtenSequence).empty()) << planned.plan.to_string();
  }
}

// Note [A norm prologue read elsewhere]: a sum that fuses with the multiply
// before it stays in their pointwise kernel, which stores it for the norm.
TEST(NormPlanner, AProducerFusedWithItsInputsIsNotTakenAlone) {
  GraphBuilder b;
  elementwise_then_layer_norm(b, DType::BFloat16, true, false, true);
  const Planned planned = plan(b);
  const auto norms = planned.groups(KernelKind::Norm);
  ASSERT_EQ(norms.size(), 1u) << planned.plan.to_string();
  EXPECT_FALSE(norms[0]->get<NormGroup>()->spec.store_x) << norms[0]->why;
  const auto pointwise = planned.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << planned.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1}));
}

// The plan of relu_gradient_then_batch_norm_sums, as PlannedNorm.
void plan_relu_gradient_sums(bool grad_nchw, PlannedNorm* out) {
  GraphBuilder b;
  relu_gradient_then_batch_norm_sums(b, grad_nchw);
  out->planned = plan(b);
  auto norms = out->planned.groups(KernelKind::Norm);
  EXPECT_EQ(norms.size(), 1u) << out->planned.plan.to_string();
  if (norms.size() == 1) out->norm = norms[0];
}

TEST(NormPlanner, BatchNormSumsTakeTheReluGradientAsPrologue) {
  PlannedNorm planned;
  plan_relu_gradient_sums(false, &planned);
  ASSERT_NE(planned.norm, nullptr);
  const Planned& p = planned.planned;
  const std::vector<const KernelGroup*> norms = {planned.norm};
  EXPECT_EQ(norms[0]->nodes, (std::vector<NodeId>{1, 2, 3})) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  const NormGroup& g = *norms[0]->get<NormGroup>();
  EXPECT_EQ(g.spec.kind, NormKind::BatchNormBackward);
  ASSERT_TRUE(g.spec.prologue.has_value());
  ASSERT_TRUE(g.general.prologue.has_value());
  const std::string prologue = g.spec.prologue->to_string();
  EXPECT_NE(prologue.find("where"), std::string::npos) << prologue;
  // The 0 is a literal of the kernel: it reads the mask's source and dy.
  EXPECT_EQ(g.spec.prologue->inputs.size(), 2u) << prologue;
  std::vector<std::string> names;
  for (const auto& [name, value] : g.inputs) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "mean", "invstd", "in0", "in1"}));
  EXPECT_NE(norms[0]->why.find("with 2 prologue elementwise ops"), std::string::npos)
      << norms[0]->why;
}

TEST(NormPlanner, BatchNormSumsReadNoPrologueInAnotherLayout) {
  PlannedNorm planned;
  plan_relu_gradient_sums(true, &planned);
  ASSERT_NE(planned.norm, nullptr);
  const Planned& p = planned.planned;
  EXPECT_FALSE(planned.norm->get<NormGroup>()->spec.prologue.has_value());
  EXPECT_NE(planned.norm->why.find("dy is not laid out as x"), std::string::npos)
      << planned.norm->why;
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
  // relu_out and dy: scalar_tensor(0) is a literal, not a 0-dim input.
  EXPECT_EQ(pointwise[0]->get<PointwiseGroup>()->inputs, (std::vector<ValueId>{1, 0}));
}

// Note [Group-norm statistics]: mybackend::group_norm_stats is one norm
// group in either layout (the launch picks the view, Note [Group-norm
// units]); its saved statistics keep x's dtype. fp64 stays ATen's.
TEST(NormPlanner, GroupNormStatisticsAreOneNormGroup) {
  for (DType dtype : {DType::BFloat16, DType::Float32, DType::Float64}) {
    for (bool channels_last : {true, false}) {
      GraphBuilder b;
      const TensorType t = nchw(dtype, {2, 32, 5, 7}, channels_last);
      ValueId x = b.add_input(out(t, "x"));
      auto stats =
          b.add_node(NodeKind::Aten, "mybackend::group_norm_stats.default",
                     {v(x), Argument::of_int(8), Argument::of_float(1e-5)},
                     {out(tensor(dtype, {2, 8})), out(tensor(dtype, {2, 8})),
                      out(tensor(DType::Float32, {2, 32})), out(tensor(DType::Float32, {2, 32}))},
                     "stats");
      b.set_outputs({v(stats[0]), v(stats[1]), v(stats[2]), v(stats[3])});
      const Planned p = plan(b);
      auto norms = p.groups(KernelKind::Norm);
      if (dtype == DType::Float64) {
        EXPECT_TRUE(norms.empty()) << p.plan.to_string();
        continue;
      }
      ASSERT_EQ(norms.size(), 1u) << p.plan.to_string();
      const NormGroup& g = *norms[0]->get<NormGroup>();
      EXPECT_EQ(g.spec.kind, NormKind::GroupNormStats);
      EXPECT_EQ(g.spec.dtype, dtype);
      EXPECT_EQ(g.spec.weight_dtype, dtype);
      EXPECT_EQ(g.spec.out_dtype, DType::Float32);
      EXPECT_DOUBLE_EQ(g.eps, 1e-5);
      std::vector<std::string> outputs;
      for (const auto& [name, value] : g.outputs) outputs.push_back(name);
      EXPECT_EQ(outputs,
                (std::vector<std::string>{"mean", "rstd", "channel_mean", "channel_rstd"}));
    }
  }
}

TEST(NormPlanner, RmsNormChainIsOneKernel) {
  for (bool upcast : {false, true}) {
    GraphBuilder b;
    rms_norm_chain(b, upcast ? DType::BFloat16 : DType::Float32, upcast, true);
    Planned p = plan(b);
    auto norms = p.groups(KernelKind::Norm);
    ASSERT_EQ(norms.size(), 1u) << p.plan.to_string();
    EXPECT_EQ(norms[0]->nodes.size(), upcast ? 8u : 6u) << p.plan.to_string();
    const NormGroup& g = *norms[0]->get<NormGroup>();
    EXPECT_EQ(g.spec.kind, NormKind::RmsNormForward);
    EXPECT_TRUE(g.spec.has_weight);
    EXPECT_TRUE(g.spec.save_stats);  // rsqrt is a graph output
    EXPECT_DOUBLE_EQ(g.eps, 1e-6);
    EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
  }
}

TEST(NormPlanner, RmsNormWithoutKeptRstdSavesNoStats) {
  GraphBuilder b;
  rms_norm_chain(b, DType::Float32, false, false);
  Planned p = plan(b);
  auto norms = p.groups(KernelKind::Norm);
  ASSERT_EQ(norms.size(), 1u) << p.plan.to_string();
  EXPECT_FALSE(norms[0]->get<NormGroup>()->spec.save_stats);
  EXPECT_EQ(norms[0]->get<NormGroup>()->outputs.size(), 1u);
}

}  // namespace
}  // namespace mybackend
