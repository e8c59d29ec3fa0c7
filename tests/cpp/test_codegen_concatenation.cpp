// Note [Concatenations in pointwise kernels]: aten::cat in generated
// pointwise groups (planner, spec validation, emitted PTX).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "fusion/pointwise_planner.h"
#include "fusion_graphs.h"
#include "spec/kernel_spec.h"

#if MYBACKEND_WITH_CODEGEN
#include "ptx_testing.h"
#endif

namespace mybackend {
namespace {

// `base` sliced along its last dim to [start, end): the base's strides.
TensorType last_dim_slice(const TensorType& base, std::int64_t start, std::int64_t end) {
  TensorType t = base;
  t.sizes.back() = Dim(end - start);
  return t;
}

ValueId slice_last(GraphBuilder& b, ValueId x, const TensorType& xt, std::int64_t start,
                   std::int64_t end, const char* name) {
  return node1(b, "aten::slice.Tensor",
               {v(x), Argument::of_int(-1), Argument::of_int(start), Argument::of_int(end),
                Argument::of_int(1)},
               last_dim_slice(xt, start, end), name);
}

ValueId cat(GraphBuilder& b, std::vector<ValueId> pieces, std::int64_t dim, const TensorType& t,
            const char* name) {
  std::vector<Argument> items;
  for (ValueId p : pieces) items.push_back(v(p));
  return node1(b, "aten::cat.default", {Argument::of_list(items), Argument::of_int(dim)}, t, name);
}

// GPT-NeoX's partial rotary embedding of x [2, 4, 8, 64]: the first 32
// channels rotated (rotate_half's cat(-x2, x1)), the rest passed through.
void rotary(GraphBuilder& b, DType dtype) {
  const TensorType xt = tensor(dtype, {2, 4, 8, 64});
  const ValueId x = b.add_input(out(xt, "x"));
  const TensorType table = tensor(dtype, {8, 32});
  const ValueId cos = b.add_input(out(table, "cos"));
  const ValueId sin = b.add_input(out(table, "sin"));
  const ValueId rot = slice_last(b, x, xt, 0, 32, "rot");
  const ValueId pass = slice_last(b, x, xt, 32, 64, "pass");
  const TensorType rot_t = last_dim_slice(xt, 0, 32);
  const ValueId r1 = slice_last(b, rot, rot_t, 0, 16, "r1");
  const ValueId r2 = slice_last(b, rot, rot_t, 16, 32, "r2");
  const TensorType half = tensor(dtype, {2, 4, 8, 16});
  const ValueId neg = node1(b, "aten::neg.default", {v(r2)}, half, "neg");
  const TensorType quarter = tensor(dtype, {2, 4, 8, 32});
  const ValueId rotated = cat(b, {neg, r1}, -1, quarter, "rotate_half");
  const ValueId a = node1(b, "aten::mul.Tensor", {v(rot), v(cos)}, quarter, "a");
  const ValueId c = node1(b, "aten::mul.Tensor", {v(rotated), v(sin)}, quarter, "c");
  const ValueId e = node1(b, "aten::add.Tensor", {v(a), v(c)}, quarter, "embedded");
  const ValueId y = cat(b, {e, pass}, -1, xt, "y");
  b.set_outputs({v(y)});
}

const KernelGroup* only_pointwise_group(const Planned& p) {
  const auto groups = p.groups(KernelKind::Pointwise);
  EXPECT_EQ(groups.size(), 1u) << all_whys(p);
  return groups.empty() ? nullptr : groups[0];
}

TEST(Concatenation, RotaryEmbeddingIsOneKernel) {
  GraphBuilder b;
  rotary(b, DType::BFloat16);
  const Planned p = plan(b);
  const KernelGroup* g = only_pointwise_group(p);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->nodes.size(), 6u) << g->spec;  // neg, both cats, two muls, add
  const PointwiseGroup& pw = *g->get<PointwiseGroup>();
  EXPECT_EQ(pw.coord_dims, std::vector<int>{3});
  EXPECT_EQ(pw.spec.coords, 1);
  // Every tensor read through a piece is guarded; only cos and sin beside
  // the rotated half are read twice (once per space they are read in).
  ASSERT_FALSE(pw.spec.guards.empty());
  for (const PwGuard& guard : pw.spec.guards) {
    EXPECT_EQ(pw.spec.inputs[static_cast<std::size_t>(guard.input)].mode, IndexMode::Strided);
    EXPECT_TRUE(pw.spec.scalars[static_cast<std::size_t>(guard.lo)].is_argument);
  }
  EXPECT_TRUE(validate(pw.spec).empty()) << validate(pw.spec);
  EXPECT_TRUE(validate(pw.general).empty()) << validate(pw.general);
  EXPECT_EQ(pw.general.guards.size(), pw.spec.guards.size());
  // The ranges of the pieces: [0, 16) and [16, 32) inside [0, 32), and [32, 64).
  std::set<std::pair<std::int64_t, std::int64_t>> ranges;
  for (const PwGuard& guard : pw.spec.guards) {
    ranges.insert({pw.spec.scalars[static_cast<std::size_t>(guard.lo)].i,
                   pw.spec.scalars[static_cast<std::size_t>(guard.hi)].i});
  }
  EXPECT_EQ(ranges, (std::set<std::pair<std::int64_t, std::int64_t>>{
                        {0, 16}, {16, 32}, {0, 32}, {32, 64}}));
}

// cat([a, b], 1) of [N, C, H, W] pieces, then a ReLU: the ReLU's kernel
// reads the pieces; channels-last outputs walk channels innermost.
void channel_cat_relu(GraphBuilder& b, bool channels_last) {
  const TensorType at = nchw(DType::Float16, {2, 24, 5, 5}, channels_last);
  const TensorType bt = nchw(DType::Float16, {2, 40, 5, 5}, channels_last);
  const TensorType yt = nchw(DType::Float16, {2, 64, 5, 5}, channels_last);
  const ValueId a = b.add_input(out(at, "a"));
  const ValueId c = b.add_input(out(bt, "b"));
  const ValueId joined = cat(b, {a, c}, 1, yt, "joined");
  const ValueId y = node1(b, "aten::relu.default", {v(joined)}, yt, "y");
  b.set_outputs({v(y)});
}

TEST(Concatenation, ChannelConcatenationJoinsItsReader) {
  for (bool channels_last : {false, true}) {
    GraphBuilder b;
    channel_cat_relu(b, channels_last);
    const Planned p = plan(b);
    const KernelGroup* g = only_pointwise_group(p);
    ASSERT_NE(g, nullptr);
    const PointwiseGroup& pw = *g->get<PointwiseGroup>();
    EXPECT_EQ(g->nodes.size(), 2u);
    EXPECT_EQ(pw.coord_dims, std::vector<int>{1});
    EXPECT_EQ(pw.spec.guards.size(), 2u);
    EXPECT_EQ(pw.order.empty(), !channels_last);
    EXPECT_EQ(pw.outputs.size(), 1u);  // the concatenation itself is never stored
  }
}

TEST(Concatenation, TheSwitchLeavesConcatenationsToAten) {
  GraphBuilder b;
  rotary(b, DType::BFloat16);
  FusionOptions options = generated_options();
  options.concatenations = false;
  const Planned p = plan(b, options);
  for (const KernelGroup* g : p.groups(KernelKind::Pointwise)) {
    for (NodeId n : g->nodes) EXPECT_FALSE(is_concatenation(p.graph.node(n))) << g->spec;
  }
  EXPECT_NE(all_whys(p).find("MYBACKEND_FUSED_CATS=0"), std::string::npos) << all_whys(p);
}

TEST(Concatenation, NestedSpacesDoNotGrowWithoutBound) {
  // cat([c, c]) twelve times over, each level doubling the spaces that read
  // the one exp below: 4096 copies of it. The group is refused and says why.
  GraphBuilder b;
  TensorType t = tensor(DType::Float32, {2, 1});
  ValueId c = node1(b, "aten::exp.default", {v(b.add_input(out(t, "x")))}, t, "e");
  for (int level = 0; level < 12; ++level) {
    t = tensor(DType::Float32, {2, t.sizes[1].static_value() * 2});
    c = cat(b, {c, c}, 1, t, "c");
  }
  const ValueId y = node1(b, "aten::neg.default", {v(c)}, t, "y");
  b.set_outputs({v(y)});
  const Planned p = plan(b);
  for (const KernelGroup* g : p.groups(KernelKind::Pointwise))
    EXPECT_LE(g->get<PointwiseGroup>()->spec.instrs.size(), 2048u + 64u);
  EXPECT_NE(all_whys(p).find("more than 2048 instructions"), std::string::npos) << all_whys(p);
}

TEST(Concatenation, LoneConcatenationStaysAten) {
  GraphBuilder b;
  const TensorType at = tensor(DType::Float32, {4, 8});
  const ValueId a = b.add_input(out(at, "a"));
  const ValueId c = b.add_input(out(at, "b"));
  const ValueId y = cat(b, {a, c}, 0, tensor(DType::Float32, {8, 8}), "y");
  b.set_outputs({v(y)});
  const Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << all_whys(p);
}

TEST(Concatenation, SymbolicSizeAlongTheDimIsRefused) {
  GraphBuilder b;
  TensorType at = tensor(DType::Float32, {4, 8});
  at.sizes[0] = Dim(SymExpr::symbol("s0"));
  at.strides = {Dim(8), Dim(1)};
  TensorType yt = at;
  yt.sizes[0] = Dim(SymExpr::symbol("s1"));
  const ValueId a = b.add_input(out(at, "a"));
  const ValueId c = b.add_input(out(at, "b"));
  const ValueId joined = cat(b, {a, c}, 0, yt, "joined");
  const ValueId y = node1(b, "aten::relu.default", {v(joined)}, yt, "y");
  b.set_outputs({v(y)});
  const Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty());
  EXPECT_NE(all_whys(p).find("symbolic"), std::string::npos) << all_whys(p);
}

TEST(Concatenation, PieceOfAnotherGroupsValueIsRefusedInTheCandidateCheck) {
  // A legacy empty piece (rank 1, size 0) cannot be walked.
  GraphBuilder b;
  const TensorType at = tensor(DType::Float32, {4, 8});
  const ValueId a = b.add_input(out(at, "a"));
  const ValueId e = b.add_input(out(tensor(DType::Float32, {0}), "empty"));
  const ValueId joined = cat(b, {a, e}, 0, at, "joined");
  const ValueId y = node1(b, "aten::relu.default", {v(joined)}, at, "y");
  b.set_outputs({v(y)});
  Graph graph = b.build();
  const std::string problem =
      concatenation_candidate_problem(graph, graph.node(graph.value(joined).producer));
  EXPECT_NE(problem.find("legacy empty"), std::string::npos) << problem;
}

TEST(Concatenation, GuardsAreValidated) {
  PointwiseSpec spec;
  spec.rank = 2;
  spec.inputs = {TensorArg{DType::Float32, IndexMode::Strided, 2}};
  spec.scalars = {PwScalar{DType::Int64, true, 0.0, 0}, PwScalar{DType::Int64, true, 0.0, 4}};
  spec.instrs = {PwInstr{PwOp::Load, DType::Float32, {}, 0}};
  spec.outputs = {PwOutput{TensorArg{DType::Float32, IndexMode::Aligned, 0}, 0}};
  spec.coords = 1;
  spec.guards = {PwGuard{0, 0, 0, 1}};
  EXPECT_EQ(validate(spec), "");
  PointwiseSpec aligned = spec;
  aligned.inputs[0] = TensorArg{DType::Float32, IndexMode::Aligned, 0};
  EXPECT_NE(validate(aligned).find("Strided"), std::string::npos);
  PointwiseSpec no_axis = spec;
  no_axis.guards[0].axis = 1;
  EXPECT_NE(validate(no_axis).find("no coordinate axis"), std::string::npos);
  PointwiseSpec literal_bound = spec;
  literal_bound.scalars[1].is_argument = false;
  EXPECT_NE(validate(literal_bound).find("kernel arguments"), std::string::npos);
  PointwiseSpec coord = spec;
  coord.instrs.push_back(PwInstr{PwOp::Coord, DType::Int64, {}, 1});
  EXPECT_NE(validate(coord).find("no coordinate axis"), std::string::npos);
  // A reduction's prologue walks no concatenation.
  ReductionSpec reduction;
  reduction.input_rank = 2;
  reduction.output_rank = 1;
  reduction.prologue = spec;
  EXPECT_NE(validate(reduction).find("concatenations"), std::string::npos) << validate(reduction);
  // Specs print their coordinates and guards (Note [Spec text is the identity]).
  EXPECT_NE(spec.to_string().find("guard in0 axis0 [sc0, sc1)"), std::string::npos)
      << spec.to_string();
}

#if MYBACKEND_WITH_CODEGEN
TEST(Concatenation, PlannedKernelsCompileToPtx) {
  std::vector<PointwiseSpec> specs;
  auto add = [&](const Planned& p) {
    for (const KernelGroup* g : p.groups(KernelKind::Pointwise)) {
      specs.push_back(g->get<PointwiseGroup>()->spec);
      specs.push_back(g->get<PointwiseGroup>()->general);
    }
  };
  for (DType d : {DType::Float32, DType::BFloat16}) {
    GraphBuilder b;
    rotary(b, d);
    add(plan(b));
  }
  for (bool channels_last : {false, true}) {
    GraphBuilder b;
    channel_cat_relu(b, channels_last);
    add(plan(b));
  }
  ASSERT_EQ(specs.size(), 8u);
  const auto outcomes = compile_to_ptx(specs, emit_pointwise);
  // The fast variants keep 16-byte stores (the output is dense).
  EXPECT_TRUE(outcomes[2].ok() && has(outcomes[2].kernel->image, k16ByteStore));
}
#endif

}  // namespace
}  // namespace mybackend
