// Stage 7: cast groups (Note [Grouped casts] in fusion/cast_groups.h) on
// hand-built IR graphs (no torch, no GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/launch_tuning.h"
#include "fusion/cast_groups.h"
#include "fusion/fusion_plan.h"
#include "fusion_graphs.h"
#include "ir/graph.h"

namespace mybackend {
namespace {

ValueId cast(GraphBuilder& b, ValueId x, const TensorType& to, const std::string& name) {
  return b.add_node(NodeKind::Aten, "prims::convert_element_type.default",
                    {v(x), Argument::of_dtype(to.dtype)}, {out(to)}, name)[0];
}

// An op no planner takes: the casts around it are separate units.
ValueId flip(GraphBuilder& b, ValueId x, const TensorType& t, const std::string& name) {
  return b.add_node(NodeKind::Aten, "aten::flip.default", {v(x), ints({0})}, {out(t)}, name)[0];
}

TensorType transposed(DType dtype, std::int64_t rows, std::int64_t cols) {
  TensorType t = tensor(dtype, {rows, cols});
  t.strides = {Dim(1), Dim(rows)};
  return t;
}

TEST(CastGroups, IndependentCastsOfInputsShareOneKernel) {
  GraphBuilder b;
  const std::vector<std::vector<std::int64_t>> shapes = {{4, 8}, {16}, {3, 5, 7}};
  std::vector<ValueId> inputs, outputs;
  for (const auto& shape : shapes)
    inputs.push_back(b.add_input(out(tensor(DType::Float32, shape))));
  outputs.push_back(cast(b, inputs[0], tensor(DType::BFloat16, shapes[0]), "w0"));
  outputs.push_back(cast(b, inputs[1], tensor(DType::Float16, shapes[1]), "w1"));
  outputs.push_back(cast(b, inputs[2], tensor(DType::BFloat16, shapes[2]), "w2"));
  b.set_outputs({v(outputs[0]), v(outputs[1]), v(outputs[2])});
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  const KernelGroup& g = *groups[0];
  EXPECT_EQ(g.nodes, (std::vector<NodeId>{0, 1, 2}));
  const CastGroup* casts = g.get<CastGroup>();
  ASSERT_NE(casts, nullptr);
  EXPECT_EQ(casts->inputs, inputs);
  EXPECT_EQ(casts->outputs, outputs);
  EXPECT_EQ(casts->pairs, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(g.spec, "cast_group pairs=f32->bf16,f32->f16 threads=" +
                        std::to_string(LaunchTuning{}.pw_block) + "\n");
  EXPECT_EQ(g.spec, casts->spec.to_string());
  EXPECT_NE(g.why.find("grouped 3 independent dtype casts"), std::string::npos) << g.why;
  // Each member keeps its one-cast pointwise group for calls the grouped
  // kernel cannot take.
  ASSERT_EQ(casts->singles.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(casts->singles[k]);
    EXPECT_EQ(casts->singles[k]->inputs, (std::vector<ValueId>{inputs[k]}));
    EXPECT_EQ(casts->singles[k]->outputs, (std::vector<ValueId>{outputs[k]}));
  }
  EXPECT_NE(p.plan.to_string().find("cast_group nodes=[0,1,2]"), std::string::npos)
      << p.plan.to_string();
}

TEST(CastGroups, ACastOfALaterResultStaysOutOfTheGroup) {
  // a = cast(x); f = flip(a); c = cast(f); d = cast(y). c reads what a's
  // unit feeds through flip: with a in one kernel, c would have to run
  // both before and after it. a and d share a kernel, c runs alone.
  GraphBuilder b;
  const TensorType f32 = tensor(DType::Float32, {8, 16});
  const TensorType bf16 = tensor(DType::BFloat16, {8, 16});
  ValueId x = b.add_input(out(f32, "x"));
  ValueId y = b.add_input(out(f32, "y"));
  ValueId a = cast(b, x, bf16, "a");
  ValueId f = flip(b, a, bf16, "f");
  ValueId c = cast(b, f, f32, "c");
  ValueId d = cast(b, y, bf16, "d");
  b.set_outputs({v(c), v(d)});
  Planned p = plan(b);  // checks that every group reads only what is ready
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 3}));
  const auto alone = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(alone.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(alone[0]->nodes, (std::vector<NodeId>{2}));
  EXPECT_EQ(alone[0]->get<PointwiseGroup>()->inputs, (std::vector<ValueId>{f}));
}

TEST(CastGroups, GroupsNeverFormACycleBetweenThem) {
  // a -> flip -> c and d -> flip -> b. Taken pair by pair, {a, b} and
  // {c, d} are independent, but as two kernels each would wait for the
  // other (a's kernel feeds c, d's feeds b). By level: {a, d}, then {b, c}.
  GraphBuilder b;
  const TensorType f32 = tensor(DType::Float32, {32});
  const TensorType bf16 = tensor(DType::BFloat16, {32});
  ValueId x0 = b.add_input(out(f32, "x0"));
  ValueId x1 = b.add_input(out(f32, "x1"));
  ValueId a = cast(b, x0, bf16, "a");   // node 0
  ValueId fa = flip(b, a, bf16, "fa");  // node 1
  ValueId c = cast(b, fa, f32, "c");    // node 2
  ValueId d = cast(b, x1, bf16, "d");   // node 3
  ValueId fd = flip(b, d, bf16, "fd");  // node 4
  ValueId bb = cast(b, fd, f32, "b");   // node 5
  b.set_outputs({v(c), v(bb)});
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 3}));
  EXPECT_EQ(groups[1]->nodes, (std::vector<NodeId>{2, 5}));
  EXPECT_EQ(groups[1]->spec,
            "cast_group pairs=bf16->f32 threads=" + std::to_string(LaunchTuning{}.pw_block) + "\n");
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
}

TEST(CastGroups, ASingleCastStaysAPointwiseGroup) {
  GraphBuilder b;
  ValueId x = b.add_input(out(tensor(DType::Float32, {64})));
  ValueId y = cast(b, x, tensor(DType::BFloat16, {64}), "y");
  b.set_outputs({v(y)});
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::CastGroup).empty()) << p.plan.to_string();
  ASSERT_EQ(p.groups(KernelKind::Pointwise).size(), 1u);  // Note [Lone casts]
}

TEST(CastGroups, OnlyPlainFloatCastsOfContiguousTensorsJoin) {
  GraphBuilder b;
  const TensorType f32 = tensor(DType::Float32, {8, 16});
  const TensorType bf16 = tensor(DType::BFloat16, {8, 16});
  ValueId x = b.add_input(out(f32, "x"));
  ValueId y = b.add_input(out(f32, "y"));
  ValueId t = b.add_input(out(transposed(DType::Float32, 8, 16), "t"));
  ValueId i = b.add_input(out(tensor(DType::Int32, {8, 16}), "i"));
  ValueId z = b.add_input(out(f32, "z"));
  ValueId cx = cast(b, x, bf16, "cx");                                // node 0: joins
  ValueId cy = cast(b, y, bf16, "cy");                                // node 1: joins
  ValueId ct = cast(b, t, transposed(DType::BFloat16, 8, 16), "ct");  // node 2: strided
  ValueId ci = cast(b, i, f32, "ci");                                 // node 3: not a float cast
  ValueId cz = cast(b, z, bf16, "cz");                                // node 4: fused with mul
  ValueId m = b.add_node(NodeKind::Aten, "aten::mul.Tensor", {v(cz), Argument::of_float(2.0)},
                         {out(bf16)}, "m")[0];  // node 5
  b.set_outputs({v(cx), v(cy), v(ct), v(ci), v(m)});
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1}));
  std::vector<std::vector<NodeId>> pointwise;
  for (const KernelGroup* g : p.groups(KernelKind::Pointwise)) pointwise.push_back(g->nodes);
  EXPECT_EQ(pointwise, (std::vector<std::vector<NodeId>>{{2}, {3}, {4, 5}})) << p.plan.to_string();
}

TensorType channels_last(DType dtype, std::int64_t k, std::int64_t c, std::int64_t r) {
  TensorType t = tensor(dtype, {k, c, r, r});
  t.strides = {Dim(c * r * r), Dim(1), Dim(r * c), Dim(c)};
  return t;
}

ValueId clone(GraphBuilder& b, ValueId x, const TensorType& t, const std::string& name) {
  return b.add_node(NodeKind::Aten, "aten::clone.default", {v(x)}, {out(t)}, name)[0];
}

// Note [Copies beside a cast]: a 1x1 convolution weight cast and copied
// into channels-last lists its elements in the same order, so the pair
// joins the group as a cast; a 3x3 weight's cast and copy moves elements and
// joins as a layout copy (Note [Grouped layout copies]).
TEST(CastGroups, CastsWithLayoutCopiesJoin) {
  GraphBuilder b;
  ValueId w1 = b.add_input(out(tensor(DType::Float32, {64, 32, 1, 1}), "w1"));
  ValueId w2 = b.add_input(out(tensor(DType::Float32, {16, 8, 1, 1}), "w2"));
  ValueId w3 = b.add_input(out(tensor(DType::Float32, {16, 8, 3, 3}), "w3"));
  ValueId c1 = cast(b, w1, tensor(DType::BFloat16, {64, 32, 1, 1}), "c1");     // node 0
  ValueId l1 = clone(b, c1, channels_last(DType::BFloat16, 64, 32, 1), "l1");  // node 1
  ValueId c2 = cast(b, w2, tensor(DType::BFloat16, {16, 8, 1, 1}), "c2");      // node 2
  ValueId l2 = clone(b, c2, channels_last(DType::BFloat16, 16, 8, 1), "l2");   // node 3
  ValueId c3 = cast(b, w3, tensor(DType::BFloat16, {16, 8, 3, 3}), "c3");      // node 4
  ValueId l3 = clone(b, c3, channels_last(DType::BFloat16, 16, 8, 3), "l3");   // node 5
  b.set_outputs({v(l1), v(l2), v(l3)});
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const CastGroup& casts = *groups[0]->get<CastGroup>();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(casts.inputs, (std::vector<ValueId>{w1, w2, w3}));
  EXPECT_EQ(casts.outputs, (std::vector<ValueId>{l1, l2, l3}));
  EXPECT_TRUE(casts.spec.layout_copies);
  ASSERT_EQ(casts.layout_copies.size(), 3u);
  EXPECT_EQ(casts.layout_copies[0], nullptr);
  EXPECT_EQ(casts.layout_copies[1], nullptr);
  ASSERT_NE(casts.layout_copies[2], nullptr);
  EXPECT_EQ(casts.singles[2], nullptr);
  EXPECT_EQ(casts.layout_copies[2]->input, w3);
  EXPECT_EQ(casts.layout_copies[2]->output, l3);
  const std::string& why = groups[0]->why;
  EXPECT_NE(why.find("grouped 3 independent dtype casts"), std::string::npos) << why;
  EXPECT_NE(why.find("1 change layout"), std::string::npos) << why;
  EXPECT_NE(why.find("beside 2 casts"), std::string::npos) << why;
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Transpose).empty()) << p.plan.to_string();
}

// Note [Grouped layout copies]: bf16 inference copies its weights into
// channels-last without a cast: lone copies, which ATen would run, and tiled
// transposes join one group of copies; a lone copy with no partner stays
// ATen's.
TEST(CastGroups, WeightCopiesWithoutCastsJoin) {
  GraphBuilder b;
  ValueId w1 = b.add_input(out(tensor(DType::BFloat16, {64, 32, 1, 1}), "w1"));
  ValueId w2 = b.add_input(out(tensor(DType::BFloat16, {64, 32, 3, 3}), "w2"));
  ValueId w3 = b.add_input(out(tensor(DType::BFloat16, {32, 3, 7, 7}), "w3"));
  ValueId l1 = clone(b, w1, channels_last(DType::BFloat16, 64, 32, 1), "l1");  // node 0
  ValueId l2 = clone(b, w2, channels_last(DType::BFloat16, 64, 32, 3), "l2");  // node 1
  ValueId l3 = clone(b, w3, channels_last(DType::BFloat16, 32, 3, 7), "l3");   // node 2
  b.set_outputs({v(l1), v(l2), v(l3)});
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const CastGroup& casts = *groups[0]->get<CastGroup>();
  EXPECT_EQ(groups[0]->spec, "cast_group pairs=bf16->bf16 threads=" +
                                 std::to_string(LaunchTuning{}.pw_block) + " layout_copies\n");
  EXPECT_EQ(casts.pairs, (std::vector<int>{0, 0, 0}));
  ASSERT_NE(casts.singles[0], nullptr);  // the 1x1 weight: a copy in element order
  EXPECT_EQ(casts.layout_copies[0], nullptr);
  EXPECT_NE(casts.layout_copies[1], nullptr);
  EXPECT_NE(casts.layout_copies[2], nullptr);
  EXPECT_NE(groups[0]->why.find("grouped 3 independent copies"), std::string::npos)
      << groups[0]->why;
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();

  GraphBuilder alone;
  ValueId w = alone.add_input(out(tensor(DType::BFloat16, {64, 32, 1, 1}), "w"));
  alone.set_outputs({v(clone(alone, w, channels_last(DType::BFloat16, 64, 32, 1), "l"))});
  Planned q = plan(alone);
  EXPECT_TRUE(q.groups(KernelKind::CastGroup).empty()) << q.plan.to_string();
  ASSERT_EQ(q.groups(KernelKind::AtenSequence).size(), 1u) << q.plan.to_string();
  EXPECT_NE(q.groups(KernelKind::AtenSequence)[0]->why.find("a lone elementwise op"),
            std::string::npos);
}

// Note [Grouped layout copies]: a group holds at most kCastGroupBytes of
// outputs; a set is cut in node order.
TEST(CastGroups, GroupsAreCutAtTheirByteBudget) {
  GraphBuilder b;
  // 512 x 512 x 3 x 3 bf16 weights: 4.5 MiB each, so 7 fit in 32 MiB.
  const int count = 10;
  std::vector<ValueId> weights, outputs;
  for (int k = 0; k < count; ++k)
    weights.push_back(b.add_input(out(tensor(DType::BFloat16, {512, 512, 3, 3}))));
  for (ValueId w : weights)
    outputs.push_back(clone(b, w, channels_last(DType::BFloat16, 512, 512, 3), "l"));
  std::vector<Argument> outs;
  for (ValueId o : outputs) outs.push_back(v(o));
  b.set_outputs(outs);
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 2u) << p.plan.to_string();
  const std::int64_t bytes = std::int64_t{512} * 512 * 9 * 2;
  std::vector<std::size_t> sizes;
  NodeId last = -1;
  for (const KernelGroup* g : groups) {
    sizes.push_back(g->get<CastGroup>()->outputs.size());
    EXPECT_LE(static_cast<std::int64_t>(sizes.back()) * bytes, kCastGroupBytes);
    EXPECT_GT(g->nodes.front(), last);  // node order
    last = g->nodes.back();
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{7, 3}));
}

TEST(CastGroups, TwoCastsInOneUnitStayOut) {
  // f32 -> bf16 -> f32 rounds: not one conversion from input to output.
  GraphBuilder b;
  ValueId x = b.add_input(out(tensor(DType::Float32, {64}), "x"));
  ValueId y = b.add_input(out(tensor(DType::Float32, {64}), "y"));
  ValueId down = cast(b, x, tensor(DType::BFloat16, {64}), "down");
  ValueId up = cast(b, down, tensor(DType::Float32, {64}), "up");
  ValueId other = cast(b, y, tensor(DType::BFloat16, {64}), "other");
  b.set_outputs({v(up), v(other)});
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::CastGroup).empty()) << p.plan.to_string();
}

TEST(CastGroups, EachDeviceGetsItsOwnKernel) {
  GraphBuilder b;
  const std::vector<const char*> devices = {"cuda:0", "cuda:1", "cuda:0", "cuda:1"};
  std::vector<ValueId> inputs;
  for (const char* device : devices)
    inputs.push_back(b.add_input(out(tensor(DType::Float32, {32}, device))));
  std::vector<Argument> outputs;
  for (std::size_t k = 0; k < devices.size(); ++k)
    outputs.push_back(v(cast(b, inputs[k], tensor(DType::Float16, {32}, devices[k]), "c")));
  b.set_outputs(outputs);
  Planned p = plan(b);
  const auto groups = p.groups(KernelKind::CastGroup);
  ASSERT_EQ(groups.size(), 2u) << p.plan.to_string();
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 2}));
  EXPECT_EQ(groups[1]->nodes, (std::vector<NodeId>{1, 3}));
}

TEST(CastGroups, NoneWithoutGeneratedKernels) {
  GraphBuilder b;
  ValueId x = b.add_input(out(tensor(DType::Float32, {64})));
  ValueId y = b.add_input(out(tensor(DType::Float32, {64})));
  ValueId cx = cast(b, x, tensor(DType::BFloat16, {64}), "cx");
  ValueId cy = cast(b, y, tensor(DType::BFloat16, {64}), "cy");
  b.set_outputs({v(cx), v(cy)});
  FusionOptions options;
  options.generated_kernels = false;
  Planned p = plan(b, options);
  EXPECT_TRUE(p.groups(KernelKind::CastGroup).empty()) << p.plan.to_string();
}

}  // namespace
}  // namespace mybackend
