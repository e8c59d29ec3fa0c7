// Stage 7: the matmul planner (CUDA engine II) on hand-built IR graphs shaped
// like aot_autograd's (no torch, no GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/matmul_planner.h"
#include "fusion_graphs.h"
#include "ir/graph.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;

Argument i(std::int64_t x) { return Argument::of_int(x); }

FusionOptions matmul_only() { return FusionOptions{}; }  // matmul on, generated kernels off

ValueId permute(GraphBuilder& b, ValueId x, const TensorType& t, std::vector<std::int64_t> dims) {
  return b.add_node(NodeKind::Aten, "aten::permute.default", {v(x), ints(std::move(dims))},
                    {out(t)}, "permute")[0];
}

ValueId addmm(GraphBuilder& b, ValueId self, ValueId m1, ValueId m2, const TensorType& t,
              double beta = 1, double alpha = 1) {
  return b.add_node(NodeKind::Aten, "aten::addmm.default",
                    {v(self), v(m1), v(m2), Argument::of_float(beta), Argument::of_float(alpha)},
                    {out(t)}, "addmm")[0];
}

ValueId gelu(GraphBuilder& b, ValueId x, const TensorType& t, const char* approximate) {
  return b.add_node(NodeKind::Aten, "aten::gelu.default", {v(x), Argument::of_string(approximate)},
                    {out(t)}, "gelu")[0];
}

const MatmulSpec& only_matmul(const Planned& p) {
  auto groups = p.groups(KernelKind::Matmul);
  EXPECT_EQ(groups.size(), 1u) << p.plan.to_string();
  return *groups.at(0)->get<MatmulSpec>();
}

// A Linear as aot_autograd leaves it: permute(weight), addmm(bias, x, ·).
struct Linear {
  GraphBuilder b;
  ValueId w, bias, x, product;
  Linear(DType dtype = BF16, const char* device = "cuda:0") {
    w = b.add_input(out(tensor(dtype, {16, 8}, device), "w"));
    bias = b.add_input(out(tensor(dtype, {16}, device), "b"));
    x = b.add_input(out(tensor(dtype, {4, 8}, device), "x"));
    const ValueId wt = permute(b, w, tensor(dtype, {8, 16}, device), {1, 0});
    product = addmm(b, bias, x, wt, tensor(dtype, {4, 16}, device));
  }
};

TEST(MatmulPlanner, LinearWithTanhGeluIsOneCall) {
  Linear l;
  const ValueId g = gelu(l.b, l.product, tensor(BF16, {4, 16}), "tanh");
  l.b.set_outputs({v(g)});
  Planned p = plan(l.b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::GeluTanhBias);
  EXPECT_EQ(spec.mat1.value, l.x);
  EXPECT_FALSE(spec.mat1.transposed);
  EXPECT_EQ(spec.mat2.value, l.w);  // read transposed in place, not copied
  EXPECT_TRUE(spec.mat2.transposed);
  EXPECT_EQ(spec.bias, l.bias);
  EXPECT_EQ(spec.output, g);
  EXPECT_EQ(spec.c, -1);
  const std::string& text = p.groups(KernelKind::Matmul)[0]->spec;
  EXPECT_NE(text.find("epilogue=gelu_tanh_bias (cublaslt GELU_BIAS)"), std::string::npos) << text;
  EXPECT_NE(text.find("mat2=%0^T"), std::string::npos) << text;
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
}

TEST(MatmulPlanner, AutotuneAsksForTimedAlgorithms) {
  for (bool autotune : {false, true}) {
    Linear l;
    l.b.set_outputs({v(l.product)});
    FusionOptions options = matmul_only();
    options.autotune = autotune;
    Planned p = plan(l.b, options);
    EXPECT_EQ(only_matmul(p).autotune, autotune);
    const std::string& text = p.groups(KernelKind::Matmul)[0]->spec;
    EXPECT_EQ(text.find("algorithm=timed") != std::string::npos, autotune) << text;
  }
}

TEST(MatmulPlanner, ErfGeluIsNotTheGeluEpilogue) {
  Linear l;
  const ValueId g = gelu(l.b, l.product, tensor(BF16, {4, 16}), "none");
  l.b.set_outputs({v(g)});
  Planned p = plan(l.b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::Bias);
  EXPECT_EQ(spec.output, l.product);
  const KernelGroup& group = *p.groups(KernelKind::Matmul)[0];
  EXPECT_EQ(group.nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_NE(group.why.find("tanh approximation"), std::string::npos) << group.why;
  auto aten = p.groups(KernelKind::AtenSequence);
  ASSERT_EQ(aten.size(), 1u);
  EXPECT_EQ(aten[0]->nodes, (std::vector<NodeId>{2}));
}

TEST(MatmulPlanner, MmViewAddBiasReluThroughA3DView) {
  GraphBuilder b;
  const ValueId x = b.add_input(out(tensor(BF16, {6, 8}), "x"));
  const ValueId w = b.add_input(out(tensor(BF16, {8, 16}), "w"));
  const ValueId bias = b.add_input(out(tensor(BF16, {16}), "bias"));
  const ValueId mm = b.add_node(NodeKind::Aten, "aten::mm.default", {v(x), v(w)},
                                {out(tensor(BF16, {6, 16}))}, "mm")[0];
  const TensorType t3 = tensor(BF16, {2, 3, 16});
  const ValueId view =
      b.add_node(NodeKind::Aten, "aten::view.default", {v(mm), ints({2, 3, 16})}, {out(t3)})[0];
  const ValueId add =
      b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(view), v(bias), i(1)}, {out(t3)}, "add")[0];
  const ValueId relu =
      b.add_node(NodeKind::Aten, "aten::relu.default", {v(add)}, {out(t3)}, "relu")[0];
  b.set_outputs({v(relu)});
  Planned p = plan(b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::ReluBias);
  EXPECT_EQ(spec.bias, bias);
  EXPECT_EQ(spec.output, relu);
  EXPECT_FALSE(spec.mat1.transposed || spec.mat2.transposed);
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3}));
}

TEST(MatmulPlanner, AProductReadTwiceKeepsItsEpilogueOutside) {
  Linear l;
  const TensorType t = tensor(BF16, {4, 16});
  const ValueId r = l.b.add_node(NodeKind::Aten, "aten::relu.default", {v(l.product)}, {out(t)})[0];
  l.b.set_outputs({v(r), v(l.product)});  // the pre-activation is saved for backward
  Planned p = plan(l.b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::Bias);
  EXPECT_EQ(spec.output, l.product);
}

TEST(MatmulPlanner, BiasGradientOfMat1IsBgradb) {
  GraphBuilder b;
  const ValueId g = b.add_input(out(tensor(BF16, {6, 16}), "grad"));
  const ValueId x = b.add_input(out(tensor(BF16, {6, 8}), "x"));
  const ValueId gt = permute(b, g, tensor(BF16, {16, 6}), {1, 0});
  const ValueId mm = b.add_node(NodeKind::Aten, "aten::mm.default", {v(gt), v(x)},
                                {out(tensor(BF16, {16, 8}))}, "mm")[0];
  const ValueId sum = b.add_node(NodeKind::Aten, "aten::sum.dim_IntList",
                                 {v(g), ints({0}), Argument::of_bool(true), Argument::none()},
                                 {out(tensor(BF16, {1, 16}))}, "sum")[0];
  b.set_outputs({v(mm), v(sum)});
  Planned p = plan(b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::BiasGradMat1);
  EXPECT_EQ(cublaslt_epilogue_name(spec.epilogue), "BGRADB");
  EXPECT_EQ(spec.bias_grad, sum);
  EXPECT_EQ(spec.mat1.value, g);
  EXPECT_TRUE(spec.mat1.transposed);
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{0, 1, 2}));
}

TEST(MatmulPlanner, BiasGradientOfMat2IsBgrada) {
  GraphBuilder b;
  const ValueId x = b.add_input(out(tensor(BF16, {6, 8}), "x"));
  const ValueId g = b.add_input(out(tensor(BF16, {6, 16}), "grad"));
  const ValueId xt = permute(b, x, tensor(BF16, {8, 6}), {1, 0});
  const ValueId mm = b.add_node(NodeKind::Aten, "aten::mm.default", {v(xt), v(g)},
                                {out(tensor(BF16, {8, 16}))})[0];
  const ValueId sum = b.add_node(NodeKind::Aten, "aten::sum.dim_IntList",
                                 {v(g), ints({-2}), Argument::of_bool(false), Argument::none()},
                                 {out(tensor(BF16, {16}))}, "sum")[0];
  b.set_outputs({v(mm), v(sum)});
  Planned p = plan(b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::BiasGradMat2);
  EXPECT_EQ(cublaslt_epilogue_name(spec.epilogue), "BGRADA");
  EXPECT_EQ(spec.bias_grad, sum);
}

TEST(MatmulPlanner, BiasGradientThatWouldCloseACycleStaysOutside) {
  GraphBuilder b;
  const ValueId g = b.add_input(out(tensor(BF16, {6, 16}), "grad"));
  const ValueId sum = b.add_node(NodeKind::Aten, "aten::sum.dim_IntList",
                                 {v(g), ints({0}), Argument::of_bool(true), Argument::none()},
                                 {out(tensor(BF16, {1, 16}))}, "sum")[0];
  // The product's other operand depends on the sum: fusing would loop.
  const ValueId h = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(g), v(sum), i(1)},
                               {out(tensor(BF16, {6, 16}))}, "add")[0];
  const ValueId gt = permute(b, g, tensor(BF16, {16, 6}), {1, 0});
  const ValueId mm = b.add_node(NodeKind::Aten, "aten::mm.default", {v(gt), v(h)},
                                {out(tensor(BF16, {16, 16}))}, "mm")[0];
  b.set_outputs({v(mm), v(sum)});
  Planned p = plan(b, matmul_only());
  const MatmulSpec& spec = only_matmul(p);
  EXPECT_EQ(spec.epilogue, MatmulEpilogue::None);
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{2, 3}));
  EXPECT_NE(p.groups(KernelKind::Matmul)[0]->why.find("not be convex"), std::string::npos);
}

TEST(MatmulPlanner, BmmWithTransposedOperandAndBaddbmmWithC) {
  GraphBuilder b;
  const ValueId a = b.add_input(out(tensor(DType::Float32, {2, 3, 4}), "a"));
  const ValueId k = b.add_input(out(tensor(DType::Float32, {2, 5, 4}), "k"));
  const ValueId c = b.add_input(out(tensor(DType::Float32, {2, 3, 5}), "c"));
  const ValueId kt = b.add_node(NodeKind::Aten, "aten::transpose.int", {v(k), i(-1), i(-2)},
                                {out(tensor(DType::Float32, {2, 4, 5}))}, "transpose")[0];
  const ValueId bmm = b.add_node(NodeKind::Aten, "aten::bmm.default", {v(a), v(kt)},
                                 {out(tensor(DType::Float32, {2, 3, 5}))}, "bmm")[0];
  const ValueId baddbmm =
      b.add_node(NodeKind::Aten, "aten::baddbmm.default",
                 {v(c), v(a), v(kt), Argument::of_float(0.5), Argument::of_float(2.0)},
                 {out(tensor(DType::Float32, {2, 3, 5}))}, "baddbmm")[0];
  b.set_outputs({v(bmm), v(baddbmm)});
  Planned p = plan(b, matmul_only());
  auto groups = p.groups(KernelKind::Matmul);
  ASSERT_EQ(groups.size(), 2u) << p.plan.to_string();
  // The transpose has two readers: both products see through it; it runs once.
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{1}));
  EXPECT_TRUE(groups[0]->get<MatmulSpec>()->batched);
  EXPECT_EQ(groups[0]->get<MatmulSpec>()->mat2.value, k);
  EXPECT_TRUE(groups[0]->get<MatmulSpec>()->mat2.transposed);
  const MatmulSpec& second = *groups[1]->get<MatmulSpec>();
  EXPECT_EQ(second.c, c);
  EXPECT_EQ(second.beta, 0.5);
  EXPECT_EQ(second.alpha, 2.0);
  EXPECT_EQ(second.epilogue, MatmulEpilogue::None);
  EXPECT_NE(groups[1]->spec.find("alpha=2 c=%2 beta=0.5"), std::string::npos) << groups[1]->spec;
}

TEST(MatmulPlanner, CpuFloat64AndTheOptionLeaveProductsToAten) {
  {
    Linear l(BF16, "cpu");
    l.b.set_outputs({v(l.product)});
    EXPECT_TRUE(plan(l.b, matmul_only()).groups(KernelKind::Matmul).empty());
  }
  {
    Linear l(DType::Float64);
    l.b.set_outputs({v(l.product)});
    Planned p = plan(l.b, matmul_only());
    EXPECT_TRUE(p.groups(KernelKind::Matmul).empty());
    EXPECT_NE(p.groups(KernelKind::AtenSequence)[0]->why.find("float64"), std::string::npos)
        << p.groups(KernelKind::AtenSequence)[0]->why;
  }
  {
    Linear l;
    l.b.set_outputs({v(l.product)});
    FusionOptions off;
    off.matmul = false;
    EXPECT_TRUE(plan(l.b, off).groups(KernelKind::Matmul).empty());
  }
}

TEST(MatmulPlanner, PointwiseGroupsNeverWrapAroundAMatmulGroup) {
  GraphBuilder b;
  const TensorType t = tensor(DType::Float32, {4, 4});
  const ValueId x = b.add_input(out(t, "x"));
  const ValueId w = b.add_input(out(t, "w"));
  const ValueId e = b.add_node(NodeKind::Aten, "aten::exp.default", {v(x)}, {out(t)}, "exp")[0];
  const ValueId n = b.add_node(NodeKind::Aten, "aten::neg.default", {v(e)}, {out(t)}, "neg")[0];
  const ValueId mm =
      b.add_node(NodeKind::Aten, "aten::mm.default", {v(n), v(w)}, {out(t)}, "mm")[0];
  const ValueId r = b.add_node(NodeKind::Aten, "aten::relu.default", {v(mm)}, {out(t)})[0];
  // Reads the pointwise group {exp, neg} and the matmul group: joining
  // {exp, neg} would make it wait for the matmul group that waits for it.
  const ValueId s = b.add_node(NodeKind::Aten, "aten::add.Tensor", {v(n), v(r), i(1)}, {out(t)})[0];
  const ValueId q = b.add_node(NodeKind::Aten, "aten::sigmoid.default", {v(s)}, {out(t)})[0];
  b.set_outputs({v(q)});
  Planned p = plan(b);  // plan() checks the order is valid
  ASSERT_EQ(p.groups(KernelKind::Matmul).size(), 1u);
  EXPECT_EQ(p.groups(KernelKind::Matmul)[0]->nodes, (std::vector<NodeId>{2, 3}));
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(pointwise[1]->nodes, (std::vector<NodeId>{4, 5}));
  EXPECT_NE(p.plan.to_string().find("matmul nodes=[2,3]"), std::string::npos);
}

// Note [Products written in f32]: mm (bf16) -> view -> upcast to f32, read
// by `reader_is_elementwise ? mul : graph output`.
struct UpcastProduct {
  GraphBuilder b;
  ValueId mm, cast;
  explicit UpcastProduct(bool reader_is_elementwise) {
    const TensorType t2 = tensor(BF16, {6, 4}), t3 = tensor(BF16, {3, 2, 4});
    const TensorType f3 = tensor(DType::Float32, {3, 2, 4});
    const ValueId x = b.add_input(out(tensor(BF16, {6, 8}), "x"));
    const ValueId w = b.add_input(out(tensor(BF16, {8, 4}), "w"));
    const ValueId g = b.add_input(out(f3, "g"));
    mm = node1(b, "aten::mm.default", {v(x), v(w)}, t2, "mm");
    const ValueId view = node1(b, "aten::view.default", {v(mm), ints({3, 2, 4})}, t3, "view");
    cast =
        node1(b, "aten::_to_copy.default", {v(view), Argument::of_dtype(DType::Float32)}, f3, "up");
    if (reader_is_elementwise) {
      b.set_outputs({v(node1(b, "aten::mul.Tensor", {v(cast), v(g)}, f3, "mul"))});
    } else {
      b.set_outputs({v(cast)});
    }
  }
};

TEST(MatmulPlanner, AnUpcastReadByElementwiseOpsRidesIntoTheirKernel) {
  UpcastProduct read_by_mul(true);
  Planned p = plan(read_by_mul.b);  // generated kernels on
  EXPECT_EQ(only_matmul(p).out_dtype, BF16) << p.plan.to_string();
  EXPECT_EQ(only_matmul(p).output, read_by_mul.mm);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{2, 3}));  // the cast and the mul

  UpcastProduct without_generated_kernels(true);
  Planned q = plan(without_generated_kernels.b, matmul_only());
  EXPECT_EQ(only_matmul(q).out_dtype, DType::Float32);

  UpcastProduct returned(false);  // a weight gradient's upcast is a graph output
  Planned r = plan(returned.b);
  EXPECT_EQ(only_matmul(r).out_dtype, DType::Float32);
  EXPECT_EQ(only_matmul(r).output, returned.cast);
}

TEST(MatmulPlanner, CandidateProblemsNameTheReason) {
  Linear l(DType::Float64);
  l.b.set_outputs({v(l.product)});
  const Graph g = l.b.build();
  EXPECT_NE(matmul_candidate_problem(g, g.node(1)).find("float64"), std::string::npos);
  EXPECT_EQ(matmul_candidate_problem(g, g.node(0)), "not a matrix product");
}

}  // namespace
}  // namespace mybackend
