// Stage 9 (runtime): views made again without the dispatcher (Note [Views
// replayed without the dispatcher] in runtime/view_replay.h), on CPU tensors.
// Needs torch (the runtime library), so it builds as one skipped test where
// the runtime is not part of the build.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/aten_call.h"

namespace mybackend {
namespace {

GraphBuilder::OutputSpec tensor_spec(std::vector<std::int64_t> sizes) {
  TensorType t;
  t.dtype = DType::Float32;
  t.device = Device::parse("cpu");
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    t.sizes.push_back(Dim(sizes[d]));
    t.strides.push_back(Dim(strides[d]));
  }
  return {ValueKind::Tensor, t, std::nullopt, ""};
}

Argument ints(std::vector<std::int64_t> values) {
  std::vector<Argument> items;
  for (std::int64_t v : values) items.push_back(Argument::of_int(v));
  return Argument::of_list(std::move(items));
}

// x [2, 3, 4] (or `in_sizes`) -> `op`(x, args...) -> views, each read by an add whose
// result is a graph output (the views stay inside the graph).
struct ViewGraph {
  Graph graph;
  ValueId input = 0;
  NodeId view = 0;
};

ViewGraph view_graph(const std::string& op, std::vector<Argument> args,
                     std::vector<std::vector<std::int64_t>> out_sizes,
                     std::vector<std::int64_t> in_sizes = {2, 3, 4}) {
  GraphBuilder b;
  ViewGraph g;
  g.input = b.add_input(tensor_spec(std::move(in_sizes)));
  args.insert(args.begin(), Argument::of_value(g.input));
  std::vector<GraphBuilder::OutputSpec> specs;
  for (const auto& sizes : out_sizes) specs.push_back(tensor_spec(sizes));
  const std::vector<ValueId> views = b.add_node(NodeKind::Aten, op, args, specs, "view");
  std::vector<Argument> outputs;
  for (ValueId v : views) {
    outputs.push_back(Argument::of_value(b.add_node(NodeKind::Aten, "aten::add.Tensor",
                                                    {Argument::of_value(v), Argument::of_value(v)},
                                                    {specs[0]}, "add")[0]));
  }
  b.set_outputs(outputs);
  g.graph = b.build();
  g.view = g.graph.value(views[0]).producer;
  return g;
}

ValueSlots slots_with(const Graph& graph, ValueId input, const at::Tensor& x) {
  ValueSlots slots(graph.values().size());
  slots[static_cast<std::size_t>(input)] = x;
  return slots;
}

at::Tensor output(const ValueSlots& slots, const Graph& graph, NodeId node, std::size_t k = 0) {
  return slots[static_cast<std::size_t>(graph.node(node).outputs[k])].toTensor();
}

// Two calls of the view node on `x`; the slots of the second, which must
// have been made without the dispatcher.
ValueSlots second_call(const ViewGraph& g, const AtenCall& call, const at::Tensor& x) {
  ValueSlots first = slots_with(g.graph, g.input, x);
  EXPECT_FALSE(call.run(first));
  ValueSlots again = slots_with(g.graph, g.input, x);
  EXPECT_TRUE(call.run(again));
  return again;
}

void expect_same_view(const at::Tensor& made, const at::Tensor& expected) {
  EXPECT_EQ(made.sizes(), expected.sizes());
  EXPECT_EQ(made.strides(), expected.strides());
  EXPECT_EQ(made.storage_offset(), expected.storage_offset());
  EXPECT_EQ(made.data_ptr(), expected.data_ptr());
  EXPECT_TRUE(at::equal(made, expected));
}

TEST(ViewReplay, ASecondCallMakesThePermuteWithoutTheDispatcher) {
  const ViewGraph g = view_graph("aten::permute.default", {ints({2, 0, 1})}, {{4, 2, 3}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor x = at::arange(24, at::kFloat).view({2, 3, 4});
  const ValueSlots again = second_call(g, call, x);
  const at::Tensor made = output(again, g.graph, g.view);
  expect_same_view(made, x.permute({2, 0, 1}));
  // In-place writes through the base count against the view too.
  const auto version = made._version();
  x.add_(1);
  EXPECT_EQ(made._version(), version + 1);
  EXPECT_TRUE(at::equal(made, x.permute({2, 0, 1})));
}

TEST(ViewReplay, ABaseOfAnotherLayoutTakesTheBoxedCall) {
  const ViewGraph g = view_graph(
      "aten::slice.Tensor",
      {Argument::of_int(2), Argument::of_int(1), Argument::of_int(3), Argument::of_int(1)},
      {{2, 3, 2}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor x = at::randn({2, 3, 4});
  ValueSlots first = slots_with(g.graph, g.input, x);
  call.run(first);
  // The same sizes, other strides and offset: a slice of a larger tensor.
  const at::Tensor wide = at::randn({2, 3, 9}).narrow(2, 3, 4);
  ValueSlots other = slots_with(g.graph, g.input, wide);
  EXPECT_FALSE(call.run(other));
  expect_same_view(output(other, g.graph, g.view), wide.slice(2, 1, 3));
  ValueSlots same = slots_with(g.graph, g.input, at::randn({2, 3, 4}));
  EXPECT_TRUE(call.run(same));
}

TEST(ViewReplay, SplitResultsAreMadeTogether) {
  const ViewGraph g = view_graph("aten::split.Tensor", {Argument::of_int(3), Argument::of_int(2)},
                                 {{2, 3, 3}, {2, 3, 1}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor x = at::randn({2, 3, 4});
  const ValueSlots again = second_call(g, call, x);
  const auto parts = x.split(3, 2);
  expect_same_view(output(again, g.graph, g.view, 0), parts[0]);
  expect_same_view(output(again, g.graph, g.view, 1), parts[1]);
}

TEST(ViewReplay, UnsafeViewIsReplayed) {
  const ViewGraph g = view_graph("aten::_unsafe_view.default", {ints({6, 4})}, {{6, 4}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor x = at::randn({2, 3, 4});
  expect_same_view(output(second_call(g, call, x), g.graph, g.view), x.view({6, 4}));
}

// A dynamic-shape graph's view takes a symbolic size from its slots: the
// size is matched beside the base's layout.
TEST(ViewReplay, ASymbolicSizeIsMatchedToo) {
  GraphBuilder b;
  const ValueId x_id = b.add_input(tensor_spec({6, 4}));
  const ValueId s_id = b.add_input({ValueKind::Int, {}, std::nullopt, "s"});
  const ValueId v =
      b.add_node(NodeKind::Aten, "aten::view.default",
                 {Argument::of_value(x_id),
                  Argument::of_list({Argument::of_value(s_id), Argument::of_int(-1)})},
                 {tensor_spec({6, 4})}, "view")[0];
  const ValueId doubled =
      b.add_node(NodeKind::Aten, "aten::add.Tensor", {Argument::of_value(v), Argument::of_value(v)},
                 {tensor_spec({6, 4})}, "add")[0];
  b.set_outputs({Argument::of_value(doubled)});
  const Graph graph = b.build();
  const AtenCall call(graph, graph.node(graph.value(v).producer));
  const at::Tensor x = at::randn({24});
  auto run = [&](std::int64_t rows, bool replayed) {
    ValueSlots slots(graph.values().size());
    slots[static_cast<std::size_t>(x_id)] = x;
    slots[static_cast<std::size_t>(s_id)] = rows;
    EXPECT_EQ(call.run(slots), replayed) << rows;
    expect_same_view(slots[static_cast<std::size_t>(v)].toTensor(), x.view({rows, -1}));
  };
  run(6, false);
  run(6, true);
  run(4, false);  // the same base, another size
  run(4, true);
  run(6, true);
}

// Each layout a node meets is kept, up to kMaxRecipes; then the oldest goes.
TEST(ViewReplay, TheLastFewLayoutsAreKept) {
  const ViewGraph g = view_graph("aten::t.default", {}, {{4, 3}}, {3, 4});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor storage = at::randn({64});
  // Bases of one shape at different offsets: one layout each.
  auto base = [&](std::int64_t k) { return storage.narrow(0, k, 12).view({3, 4}); };
  auto run = [&](std::int64_t k) {
    ValueSlots slots = slots_with(g.graph, g.input, base(k));
    const bool replayed = call.run(slots);
    expect_same_view(output(slots, g.graph, g.view), base(k).t());
    return replayed;
  };
  const auto kept = static_cast<std::int64_t>(ViewReplay::kMaxRecipes);
  for (std::int64_t k = 0; k < kept; ++k) EXPECT_FALSE(run(k));
  for (std::int64_t k = 0; k < kept; ++k) EXPECT_TRUE(run(k));
  EXPECT_FALSE(run(kept));  // a new layout, kept in place of the oldest
  EXPECT_TRUE(run(kept));
  EXPECT_FALSE(run(0));
  EXPECT_TRUE(run(kept - 1));
}

// reshape copies a base it cannot view: what it made was no view, so the
// node is never replayed, whatever later bases look like.
TEST(ViewReplay, AReshapeThatCopiedIsNeverReplayed) {
  const ViewGraph g = view_graph("aten::reshape.default", {ints({24})}, {{24}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor strided = at::randn({4, 3, 2}).permute({2, 1, 0});
  ValueSlots first = slots_with(g.graph, g.input, strided);
  EXPECT_FALSE(call.run(first));
  EXPECT_NE(output(first, g.graph, g.view).data_ptr(), strided.data_ptr());
  ValueSlots again = slots_with(g.graph, g.input, strided);
  EXPECT_FALSE(call.run(again));
  EXPECT_TRUE(at::equal(output(again, g.graph, g.view), strided.reshape({24})));
}

TEST(ViewReplay, AViewOfAnotherDtypeIsBoxed) {
  const ViewGraph g =
      view_graph("aten::view.dtype", {Argument::of_dtype(DType::Int32)}, {{2, 3, 4}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor x = at::randn({2, 3, 4});
  ValueSlots first = slots_with(g.graph, g.input, x);
  call.run(first);
  ValueSlots again = slots_with(g.graph, g.input, x);
  EXPECT_FALSE(call.run(again));
  EXPECT_EQ(output(again, g.graph, g.view).scalar_type(), at::kInt);
}

// What the caller receives keeps ATen's view metadata (._base, autograd).
TEST(ViewReplay, AGraphOutputIsAlwaysBoxed) {
  GraphBuilder b;
  const ValueId x_id = b.add_input(tensor_spec({3, 4}));
  const ValueId t = b.add_node(NodeKind::Aten, "aten::t.default", {Argument::of_value(x_id)},
                               {tensor_spec({4, 3})}, "t")[0];
  b.set_outputs({Argument::of_value(t)});
  const Graph graph = b.build();
  const AtenCall call(graph, graph.node(graph.value(t).producer));
  const at::Tensor x = at::randn({3, 4});
  for (int k = 0; k < 2; ++k) {
    ValueSlots slots = slots_with(graph, x_id, x);
    EXPECT_FALSE(call.run(slots));
    EXPECT_TRUE(slots[static_cast<std::size_t>(t)].toTensor().is_view());
  }
}

// With grad mode on, a view of a tensor that requires grad records history.
TEST(ViewReplay, ABaseThatRequiresGradUnderGradModeIsBoxed) {
  const ViewGraph g = view_graph("aten::permute.default", {ints({2, 0, 1})}, {{4, 2, 3}});
  const AtenCall call(g.graph, g.graph.node(g.view));
  const at::Tensor w = at::randn({2, 3, 4}).set_requires_grad(true);
  c10::AutoGradMode on(true);
  for (int k = 0; k < 2; ++k) {
    ValueSlots slots = slots_with(g.graph, g.input, w);
    EXPECT_FALSE(call.run(slots));
    EXPECT_TRUE(output(slots, g.graph, g.view).requires_grad());
  }
  c10::AutoGradMode off(false);
  ValueSlots slots = slots_with(g.graph, g.input, w);
  EXPECT_FALSE(call.run(slots));  // remembered now
  ValueSlots again = slots_with(g.graph, g.input, w);
  EXPECT_TRUE(call.run(again));
  EXPECT_FALSE(output(again, g.graph, g.view).requires_grad());
}

}  // namespace
}  // namespace mybackend

#else

TEST(ViewReplay, NeedsTheRuntimeLibrary) { GTEST_SKIP() << "built without the runtime"; }

#endif
