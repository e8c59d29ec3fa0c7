// Stage 7: the claiming planners together (Note [Claimed groups]): the
// matmul planner claims first, the reduction planner takes only what is
// left, the pointwise planner places both kinds as fixed units, and the
// reasons every claiming planner records reach the ATen groups' why.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "fusion/claimed_groups.h"
#include "reduction_graphs.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;

// A Linear's backward core: grad_w = mm(permute(g), x), grad_b = sum(g, [0])
// (keepdim), and an elementwise op on grad_b that a reduction group would
// take as its epilogue.
void linear_backward(GraphBuilder& b) {
  const ValueId g = b.add_input(out(tensor(BF16, {6, 16}), "grad"));
  const ValueId x = b.add_input(out(tensor(BF16, {6, 8}), "x"));
  const ValueId gt =
      node1(b, "aten::permute.default", {v(g), ints({1, 0})}, tensor(BF16, {16, 6}), "permute");
  const ValueId mm = node1(b, "aten::mm.default", {v(gt), v(x)}, tensor(BF16, {16, 8}), "mm");
  const ValueId sum = node1(b, "aten::sum.dim_IntList",
                            {v(g), ints({0}), Argument::of_bool(true), Argument::none()},
                            tensor(BF16, {1, 16}), "sum");
  const ValueId neg = node1(b, "aten::neg.default", {v(sum)}, tensor(BF16, {1, 16}), "neg");
  b.set_outputs({v(mm), v(sum), v(neg)});
}

TEST(ClaimedGroups, TheMatmulPlannerClaimsTheBiasGradientSumFirst) {
  GraphBuilder b;
  linear_backward(b);
  Planned p = plan(b);
  auto matmul = p.groups(KernelKind::Matmul);
  ASSERT_EQ(matmul.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(matmul[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  EXPECT_EQ(matmul[0]->get<MatmulSpec>()->epilogue, MatmulEpilogue::BiasGradMat1);
  EXPECT_TRUE(p.groups(KernelKind::Reduction).empty()) << p.plan.to_string();
}

TEST(ClaimedGroups, WithoutMatmulGroupsTheSumAnchorsAReduction) {
  GraphBuilder b;
  linear_backward(b);
  FusionOptions options = generated_options();
  options.matmul = false;
  Planned p = plan(b, options);
  EXPECT_TRUE(p.groups(KernelKind::Matmul).empty());
  auto reductions = p.groups(KernelKind::Reduction);
  ASSERT_EQ(reductions.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(reductions[0]->nodes, (std::vector<NodeId>{2, 3}));
}

TEST(ClaimedGroups, MatmulEpilogueNormAndPointwiseGroupsInOnePartition) {
  // relu(addmm(b, x, permute(w))) -> softmax -> mul -> exp: the matmul group
  // takes relu, the norm group the softmax, a pointwise group the rest.
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 16});
  const ValueId w = b.add_input(out(tensor(DType::Float32, {16, 8}), "w"));
  const ValueId bias = b.add_input(out(tensor(DType::Float32, {16}), "b"));
  const ValueId x = b.add_input(out(tensor(DType::Float32, {4, 8}), "x"));
  const ValueId wt = node1(b, "aten::permute.default", {v(w), ints({1, 0})},
                           tensor(DType::Float32, {8, 16}), "permute");
  const ValueId mm =
      node1(b, "aten::addmm.default",
            {v(bias), v(x), v(wt), Argument::of_float(1), Argument::of_float(1)}, t, "addmm");
  const ValueId r = node1(b, "aten::relu.default", {v(mm)}, t, "relu");
  const ValueId s = node1(b, "aten::_softmax.default",
                          {v(r), Argument::of_int(-1), Argument::of_bool(false)}, t, "softmax");
  const ValueId m = node1(b, "aten::mul.Tensor", {v(s), Argument::of_float(2.0)}, t, "mul");
  const ValueId e = node1(b, "aten::exp.default", {v(m)}, t, "exp");
  b.set_outputs({v(e)});
  Planned p = plan(b);  // checks every node is placed once, in a valid order
  ASSERT_EQ(p.groups(KernelKind::Matmul).size(), 1u) << p.plan.to_string();
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  ASSERT_EQ(p.groups(KernelKind::Norm).size(), 1u) << p.plan.to_string();
  EXPECT_EQ(p.groups(KernelKind::Norm)[0]->nodes, (std::vector<NodeId>{3}));
  ASSERT_EQ(p.groups(KernelKind::Pointwise).size(), 1u) << p.plan.to_string();
  EXPECT_EQ(p.groups(KernelKind::Pointwise)[0]->nodes, (std::vector<NodeId>{4, 5}));
  const auto& groups = p.plan.partitions.at(0).groups;
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].kind(), KernelKind::Matmul);
  EXPECT_EQ(groups[1].kind(), KernelKind::Norm);
  EXPECT_EQ(groups[2].kind(), KernelKind::Pointwise);
}

TEST(ClaimedGroups, EveryClaimingPlannersRefusalReachesTheAtenGroup) {
  // An f64 product (no cuBLASLt group) and a lone sum (no reduction group).
  auto build = [](GraphBuilder& b) {
    const TensorType t = tensor(DType::Float64, {4, 4});
    const ValueId x = b.add_input(out(t, "x"));
    const ValueId mm = node1(b, "aten::mm.default", {v(x), v(x)}, t, "mm");
    const ValueId sum = node1(b, "aten::sum.dim_IntList",
                              {v(mm), ints({1}), Argument::of_bool(false), Argument::none()},
                              tensor(DType::Float64, {4}), "sum");
    b.set_outputs({v(sum)});
  };
  for (bool generated : {true, false}) {
    FusionOptions options;
    options.generated_kernels = generated;
    GraphBuilder b;
    build(b);
    Planned p = plan(b, options);
    auto aten = p.groups(KernelKind::AtenSequence);
    ASSERT_EQ(aten.size(), 1u) << p.plan.to_string();
    EXPECT_NE(aten[0]->why.find("mm: no cuBLASLt group: "), std::string::npos) << aten[0]->why;
    EXPECT_NE(aten[0]->why.find("float64"), std::string::npos) << aten[0]->why;
    // The reduction planner runs only with generated kernels.
    EXPECT_EQ(aten[0]->why.find("sum: a lone reduction") != std::string::npos, generated)
        << aten[0]->why;
  }
}

TEST(ClaimedGroups, ClaimingDropsRefusalsAndLaterRefusalsOfClaimedNodes) {
  ClaimedGroups claimed;
  claimed.refuse(3, "first look");
  claimed.refuse(3, "second look");
  claimed.refuse(5, "stays");
  EXPECT_EQ(claimed.refusals().at(3), "second look");
  KernelGroup group;
  group.set(std::make_shared<ReductionGroup>());
  group.nodes = {2, 3};
  claimed.claim(group);
  EXPECT_TRUE(claimed.claimed(2));
  EXPECT_TRUE(claimed.claimed(3));
  EXPECT_FALSE(claimed.claimed(5));
  claimed.refuse(2, "too late");
  EXPECT_EQ(claimed.refusals().count(2), 0u);
  EXPECT_EQ(claimed.refusals().count(3), 0u);
  EXPECT_EQ(claimed.refusals().at(5), "stays");
  ASSERT_EQ(claimed.groups().size(), 1u);
  KernelGroup overlapping;
  overlapping.nodes = {3, 4};
  EXPECT_THROW(claimed.claim(overlapping), InternalError);
}

}  // namespace
}  // namespace mybackend
