// Pipeline: a compile's plan saved as bytes and compiled again without
// planning (Note [Plan archive] in pipeline/plan_archive.h), on hand-built
// graphs that give every kind of kernel group (no GPU: generated kernels
// are planned but not compiled). Needs the runtime library.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/archive.h"
#include "common/error.h"
#include "fusion/fusion_plan_archive.h"
#include "fusion_graphs.h"
#include "pipeline/pipeline.h"
#include "pipeline/plan_archive.h"
#include "pool_graphs.h"
#include "reduction_graphs.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;
const DType F32 = DType::Float32;

// ---- graphs ------------------------------------------------------------------

// exp(x * 2) + y on CUDA, then a cumsum (no partition takes it) on its result.
void pointwise_and_unsupported(GraphBuilder& b) {
  const TensorType t = tensor(F32, {4, 8});
  const ValueId x = b.add_input(out(t, "x"));
  const ValueId y = b.add_input(out(t, "y"));
  const ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(2.0)}, t, "mul");
  const ValueId e = node1(b, "aten::exp.default", {v(m)}, t, "exp");
  const ValueId a = node1(b, "aten::add.Tensor", {v(e), v(y), Argument::of_int(1)}, t, "add");
  const ValueId c = node1(b, "aten::cumsum.default", {v(a), Argument::of_int(1)}, t, "cumsum");
  b.set_outputs({v(a), v(c)});
}

// The same on the CPU: ATen sequences only.
void cpu_pointwise(GraphBuilder& b) {
  const TensorType t = tensor(F32, {4, 8}, "cpu");
  const ValueId x = b.add_input(out(t, "x"));
  const ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(0.1)}, t, "mul");
  const ValueId e = node1(b, "aten::exp.default", {v(m)}, t, "exp");
  b.set_outputs({v(e)});
}

// gelu(addmm(bias, x, permute(w)), approximate='tanh'): one cuBLASLt call.
void linear_gelu(GraphBuilder& b) {
  const ValueId w = b.add_input(out(tensor(BF16, {16, 8}), "w"));
  const ValueId bias = b.add_input(out(tensor(BF16, {16}), "b"));
  const ValueId x = b.add_input(out(tensor(BF16, {4, 8}), "x"));
  const ValueId wt =
      node1(b, "aten::permute.default", {v(w), ints({1, 0})}, tensor(BF16, {8, 16}), "permute");
  const ValueId y = node1(b, "aten::addmm.default",
                          {v(bias), v(x), v(wt), Argument::of_float(1), Argument::of_float(1)},
                          tensor(BF16, {4, 16}), "addmm");
  const ValueId g = node1(b, "aten::gelu.default", {v(y), Argument::of_string("tanh")},
                          tensor(BF16, {4, 16}), "gelu");
  b.set_outputs({v(g)});
}

GraphBuilder::OutputSpec int_out() { return {ValueKind::Int, {}, std::nullopt, "int"}; }
GraphBuilder::OutputSpec opaque_out() { return {ValueKind::Opaque, {}, std::nullopt, "none"}; }

// A training flash attention forward: out, logsumexp and what the backward saves.
void flash_forward(GraphBuilder& b) {
  const TensorType bhsd = tensor(BF16, {2, 4, 128, 64});
  const ValueId q = b.add_input(out(bhsd, "q"));
  const ValueId k = b.add_input(out(bhsd, "k"));
  const ValueId vv = b.add_input(out(bhsd, "v"));
  auto outs = b.add_node(NodeKind::Aten, "aten::_scaled_dot_product_flash_attention.default",
                         {v(q), v(k), v(vv), Argument::of_float(0.0), Argument::of_bool(true),
                          Argument::of_bool(false), Argument::none()},
                         {out(bhsd), out(tensor(F32, {2, 4, 128})), opaque_out(), opaque_out(),
                          int_out(), int_out(), out(tensor(DType::UInt64, {2}, "meta")),
                          out(tensor(DType::UInt64, {}, "meta")), out(tensor(BF16, {0}))},
                         "flash");
  b.set_outputs({v(outs[0]), v(outs[1]), v(outs[4]), v(outs[6]), v(outs[7])});
}

// An efficient attention backward whose gradients are written into their
// concatenation (Note [Gradients written stacked]).
void stacked_attention_backward(GraphBuilder& b) {
  const TensorType bhsd = tensor(BF16, {2, 4, 128, 64});
  std::vector<Argument> args;
  for (const char* name : {"grad", "q", "k", "v"}) args.push_back(v(b.add_input(out(bhsd, name))));
  args.push_back(v(b.add_input(out(tensor(BF16, {2, 4, 128, 128}), "bias"))));
  args.push_back(v(b.add_input(out(bhsd, "o"))));
  args.push_back(v(b.add_input(out(tensor(F32, {2, 4, 128}), "lse"))));
  for (const char* name : {"seed", "offset"})
    args.push_back(v(b.add_input(out(tensor(DType::Int64, {}), name))));
  args.push_back(Argument::of_float(0.0));
  args.push_back(Argument::of_list({Argument::of_bool(true), Argument::of_bool(true),
                                    Argument::of_bool(true), Argument::of_bool(false)}));
  args.push_back(Argument::of_bool(false));
  args.push_back(Argument::of_float(0.125));
  auto grads =
      b.add_node(NodeKind::Aten, "aten::_scaled_dot_product_efficient_attention_backward.default",
                 args, {out(bhsd), out(bhsd), out(bhsd), opaque_out()}, "efficient_backward");
  std::vector<Argument> parts;
  for (int g : {2, 0, 1}) {
    const ValueId one = node1(b, "aten::unsqueeze.default", {v(grads[g]), Argument::of_int(0)},
                              tensor(BF16, {1, 2, 4, 128, 64}), "unsqueeze");
    parts.push_back(v(node1(b, "aten::permute.default", {v(one), ints({1, 3, 0, 2, 4})},
                            tensor(BF16, {2, 128, 1, 4, 64}), "permute")));
  }
  const ValueId stacked =
      node1(b, "aten::cat.default", {Argument::of_list(parts), Argument::of_int(2)},
            tensor(BF16, {2, 128, 3, 4, 64}), "cat");
  b.set_outputs({v(stacked)});
}

// relu(batch_norm(conv(x, w) + bias) + residual): one cuDNN graph.
void conv_block(GraphBuilder& b) {
  const TensorType y = tensor(BF16, {2, 8, 6, 6});
  const TensorType c = tensor(F32, {8});
  const ValueId x = b.add_input(out(y, "x"));
  const ValueId w = b.add_input(out(tensor(BF16, {8, 8, 3, 3}), "w"));
  const ValueId bias = b.add_input(out(tensor(BF16, {8}), "bias"));
  std::vector<Argument> bn;
  for (const char* name : {"bn_weight", "bn_bias", "mean", "var"})
    bn.push_back(v(b.add_input(out(c, name))));
  const ValueId residual = b.add_input(out(y, "residual"));
  const ValueId conv = node1(b, "aten::convolution.default",
                             {v(x), v(w), v(bias), ints({1, 1}), ints({1, 1}), ints({1, 1}),
                              Argument::of_bool(false), ints({0, 0}), Argument::of_int(1)},
                             y, "convolution");
  std::vector<Argument> bn_args{v(conv)};
  bn_args.insert(bn_args.end(), bn.begin(), bn.end());
  bn_args.push_back(Argument::of_float(0.1));
  bn_args.push_back(Argument::of_float(1e-5));
  const ValueId normed =
      b.add_node(NodeKind::Aten, "aten::_native_batch_norm_legit_no_training.default", bn_args,
                 {out(y), out(tensor(F32, {0})), out(tensor(F32, {0}))}, "bn")[0];
  const ValueId sum =
      node1(b, "aten::add.Tensor", {v(normed), v(residual), Argument::of_int(1)}, y, "add");
  b.set_outputs({v(node1(b, "aten::relu.default", {v(sum)}, y, "relu"))});
}

// Three independent dtype casts: one cast-group kernel.
void independent_casts(GraphBuilder& b) {
  const std::vector<std::vector<std::int64_t>> shapes = {{4, 8}, {16}, {3, 5, 7}};
  std::vector<Argument> outputs;
  std::vector<ValueId> inputs;
  for (const auto& shape : shapes) inputs.push_back(b.add_input(out(tensor(F32, shape))));
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const DType to = k == 1 ? DType::Float16 : BF16;
    outputs.push_back(v(node1(b, "aten::_to_copy.default", {v(inputs[k]), Argument::of_dtype(to)},
                              tensor(to, shapes[k]), "cast")));
  }
  b.set_outputs(outputs);
}

// Autocast's conv weight path: an f32 [16, 8, 3, 3] weight cast to bf16 and
// copied into channels-last, one tiled transposing copy (Note [Tiled
// transposing copies]).
void weight_into_channels_last(GraphBuilder& b) {
  const std::vector<std::int64_t> sizes = {16, 8, 3, 3};
  const ValueId w = b.add_input(out(tensor(F32, sizes), "w"));
  const ValueId cast = node1(b, "aten::_to_copy.default", {v(w), Argument::of_dtype(BF16)},
                             tensor(BF16, sizes), "cast");
  b.set_outputs({v(node1(b, "aten::clone.default", {v(cast)}, nchw(BF16, sizes, true), "clone"))});
}

// bf16 inference's weight copies: a 1x1 weight's copy keeps the element
// order, two 3x3 weights' copies transpose; one cast group with layout copies
// (Note [Grouped layout copies]).
void weight_copies(GraphBuilder& b) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {16, 8, 1, 1}, {16, 8, 3, 3}, {8, 8, 3, 3}};
  std::vector<ValueId> inputs;
  for (const auto& sizes : shapes) inputs.push_back(b.add_input(out(tensor(BF16, sizes), "w")));
  std::vector<Argument> outputs;
  for (std::size_t k = 0; k < shapes.size(); ++k)
    outputs.push_back(
        v(node1(b, "aten::clone.default", {v(inputs[k])}, nchw(BF16, shapes[k], true), "clone")));
  b.set_outputs(outputs);
}

struct NamedGraph {
  const char* name;
  std::function<void(GraphBuilder&)> build;
};

std::vector<NamedGraph> graphs() {
  return {
      {"pointwise_and_unsupported", pointwise_and_unsupported},
      {"cpu_pointwise", cpu_pointwise},
      {"reduction",
       [](GraphBuilder& b) {
         sum_with_prologue_and_epilogue(b, BF16, {8, 16, 3}, {0, 1}, true);
       }},
      {"softmax", [](GraphBuilder& b) { softmax(b, F32, -1, true); }},
      {"layer_norm", [](GraphBuilder& b) { layer_norm(b, BF16); }},
      {"rms_norm", [](GraphBuilder& b) { rms_norm_chain(b, BF16, true, true); }},
      {"row_epilogue", [](GraphBuilder& b) { rms_norm_backward_rows(b, BF16); }},
      {"norm_prologue", [](GraphBuilder& b) { elementwise_then_layer_norm(b, BF16, true, true); }},
      {"norm_prologue_stored",
       [](GraphBuilder& b) { elementwise_then_layer_norm(b, BF16, true, false); }},
      {"norm_epilogue", [](GraphBuilder& b) { layer_norm_backward_then_residual(b, true, true); }},
      {"linear_gelu", linear_gelu},
      {"flash_forward", flash_forward},
      {"stacked_attention_backward", stacked_attention_backward},
      {"conv_block", conv_block},
      {"independent_casts", independent_casts},
      {"stem_pool", [](GraphBuilder& b) { stem_pool(b, StemOptions{}); }},
      {"stem_pool_backward", [](GraphBuilder& b) { stem_pool_backward(b, BackwardOptions{}); }},
      {"weight_into_channels_last", weight_into_channels_last},
      {"weight_copies", weight_copies},
  };
}

// ---- compiles ----------------------------------------------------------------

// Every engine on, nothing compiled (no GPU here: the codegen stage keeps
// the reason for each generated group).
CompileOptions options() {
  CompileOptions options;
  options.fusion.generated_kernels = true;
  options.codegen.cache.kind = KernelCacheLocation::Kind::Off;
  options.codegen.switched_off = "not compiled in this test";
  return options;
}

std::shared_ptr<const Graph> build(const NamedGraph& named) {
  GraphBuilder b;
  named.build(b);
  return std::make_shared<const Graph>(b.build());
}

std::shared_ptr<const Graph> build(const std::string& name) {
  for (const NamedGraph& named : graphs())
    if (name == named.name) return build(named);
  throw Error("no graph " + name);
}

// A plan as text: what FusionPlan::to_string() prints, each group's why and
// its general variant's spec, the partitions and the decisions.
std::string printed(const CorePlan& plan) {
  std::string text = plan.fusion.to_string();
  for (const PartitionPlan& partition : plan.fusion.partitions) {
    for (const KernelGroup& group : partition.groups) {
      text += "why " + group.why + "\n";
      if (const auto* g = group.get<PointwiseGroup>()) text += g->general.to_string();
      if (const auto* g = group.get<ReductionGroup>()) text += g->general.to_string();
      if (const auto* g = group.get<NormGroup>()) text += g->general.to_string();
      if (const auto* g = group.get<PoolGroup>()) text += g->general.to_string();
      if (const auto* g = group.get<TransposeGroup>()) {
        text += "copy " + std::to_string(g->input) + " -> " + std::to_string(g->output);
        for (const std::vector<int>* dims : {&g->batch_dims, &g->a_dims, &g->b_dims}) {
          text += " |";
          for (int d : *dims) text += " " + std::to_string(d);
        }
        text += "\n";
      }
      if (const auto* g = group.get<CastGroup>()) {
        for (std::size_t k = 0; k < g->singles.size(); ++k) {
          if (g->singles[k]) text += g->singles[k]->spec.to_string();
          if (const auto& copy = g->layout_copies[k])
            text += copy->spec.to_string() + " " + std::to_string(copy->input) + " -> " +
                    std::to_string(copy->output) + "\n";
        }
      }
    }
  }
  const PartitionResult& r = plan.partitions;
  for (std::size_t p = 0; p < r.partitions.size(); ++p) {
    text += "partition " + std::to_string(p) + ":";
    for (int node : r.partitions[p]) text += " " + std::to_string(node);
    text += "\n";
  }
  for (int p : r.partition_of) text += std::to_string(p) + ",";
  for (const DroppedNode& d : r.dropped) text += "\ndropped " + std::to_string(d.node) + d.reason;
  for (const ScheduleStep& s : r.schedule)
    text += (s.is_partition ? "\nrun partition " : "\nrun node ") + std::to_string(s.index);
  for (const SupportDecision& d : plan.decisions) {
    text += "\n" + std::to_string(d.supported) + " " + std::string(op_class_name(d.op_class)) +
            " " + d.reason;
  }
  return text;
}

std::vector<std::string> stage_names(const CompiledGraph& compiled) {
  std::vector<std::string> names;
  for (const auto& [stage, seconds] : compiled.report().stage_times) names.push_back(stage);
  return names;
}

// The message of the Error loading `bytes` for `graph` raises ("" if none).
std::string load_error(const Graph& graph, const std::string& bytes,
                       const PlanningOptions& planning = options()) {
  try {
    load_plan(graph, planning, bytes);
  } catch (const InternalError& e) {
    return std::string("internal error, not a check: ") + e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& message, const std::string& expected) {
  EXPECT_NE(message.find(expected), std::string::npos)
      << "expected an error with '" << expected << "', got '" << message << "'";
}

// ---- tests -------------------------------------------------------------------

TEST(PlanArchive, ACompiledPlanCompilesAgainWithoutPlanningToTheSamePlan) {
  std::set<KernelKind> kinds;
  for (const NamedGraph& named : graphs()) {
    SCOPED_TRACE(named.name);
    const std::shared_ptr<const Graph> graph = build(named);
    const auto compiled = compile_graph(graph, options(), nullptr);
    const std::string bytes = compiled->plan_bytes();
    const auto planned = compile_planned_graph(graph, bytes, options(), nullptr);
    EXPECT_EQ(printed(planned->report()), printed(compiled->report()));
    EXPECT_EQ(planned->plan_bytes(), bytes);  // and the bytes are the same again
    EXPECT_EQ(stage_names(*planned),
              (std::vector<std::string>{"verify", "load_plan", "codegen", "runtime"}));
    EXPECT_EQ(planned->executor().generated_groups().size(),
              compiled->executor().generated_groups().size());
    for (const PartitionPlan& partition : compiled->report().fusion.partitions)
      for (const KernelGroup& group : partition.groups) kinds.insert(group.kind());
  }
  // The graphs give every kind of group.
  for (std::size_t k = 0; k < kKernelKindCount; ++k) {
    const auto kind = static_cast<KernelKind>(k);
    EXPECT_TRUE(kinds.count(kind)) << "no graph plans a " << kernel_kind_name(kind) << " group";
  }
}

// Group norm's statistics (Note [Group-norm statistics]) over
// channels-last bf16 x [2, 32, 5, 7], 8 groups.
void group_norm_statistics(GraphBuilder& b) {
  const TensorType t = nchw(BF16, {2, 32, 5, 7}, true);
  ValueId x = b.add_input(out(t, "x"));
  auto stats = b.add_node(NodeKind::Aten, "mybackend::group_norm_stats.default",
                          {v(x), Argument::of_int(8), Argument::of_float(1e-5)},
                          {out(tensor(BF16, {2, 8})), out(tensor(BF16, {2, 8})),
                           out(tensor(F32, {2, 32})), out(tensor(F32, {2, 32}))},
                          "stats");
  b.set_outputs({v(stats[0]), v(stats[1]), v(stats[2]), v(stats[3])});
}

TEST(PlanArchive, APlanOfThePlannersAloneRoundTrips) {
  // The batch-norm and group-norm ops are registered by mybackend's Python
  // package, so the runtime stage cannot take these graphs here: the
  // planners alone.
  for (const auto& build_graph : std::vector<std::function<void(GraphBuilder&)>>{
           [](GraphBuilder& b) { relu_gradient_then_batch_norm_sums(b, false); },
           group_norm_statistics}) {
    GraphBuilder b;
    build_graph(b);
    const Planned p = plan(b);
    ASSERT_FALSE(p.groups(KernelKind::Norm).empty()) << p.plan.to_string();
    const std::size_t nodes = p.graph.nodes().size();
    CorePlan core;
    core.decisions.assign(nodes, SupportDecision{true, OpClass::Normalization, ""});
    core.partitions = partition_graph(p.graph, std::vector<bool>(nodes, true),
                                      std::vector<bool>(nodes, false), {});
    core.fusion = p.plan;
    PlanningOptions planning;
    planning.fusion = generated_options();
    const std::string bytes = save_plan(p.graph, planning, core);
    const CorePlan loaded = load_plan(p.graph, planning, bytes);
    EXPECT_EQ(printed(loaded), printed(core));
    EXPECT_EQ(save_plan(p.graph, planning, loaded), bytes);
  }
}

TEST(PlanArchive, AConcatenationsCoordinatesAndGuardsRoundTrip) {
  // Note [Concatenations in pointwise kernels]: relu(cat([a, b], 1) * 2).
  GraphBuilder b;
  const TensorType at = nchw(BF16, {2, 8, 3, 3}, true);
  const TensorType bt = nchw(BF16, {2, 24, 3, 3}, true);
  const TensorType yt = nchw(BF16, {2, 32, 3, 3}, true);
  const ValueId a = b.add_input(out(at, "a"));
  const ValueId c = b.add_input(out(bt, "b"));
  const ValueId joined = node1(b, "aten::cat.default",
                               {Argument::of_list({v(a), v(c)}), Argument::of_int(1)}, yt, "cat");
  const ValueId scaled =
      node1(b, "aten::mul.Tensor", {v(joined), Argument::of_float(2.0)}, yt, "scaled");
  const ValueId y = node1(b, "aten::relu.default", {v(scaled)}, yt, "y");
  b.set_outputs({v(y)});
  const Planned p = plan(b);
  const auto groups = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string();
  const std::size_t nodes = p.graph.nodes().size();
  CorePlan core;
  core.decisions.assign(nodes, SupportDecision{true, OpClass::Pointwise, ""});
  core.partitions =
      partition_graph(p.graph, std::vector<bool>(nodes, true), std::vector<bool>(nodes, false), {});
  core.fusion = p.plan;
  PlanningOptions planning;
  planning.fusion = generated_options();
  const std::string bytes = save_plan(p.graph, planning, core);
  const CorePlan loaded = load_plan(p.graph, planning, bytes);
  const PointwiseGroup* before = groups[0]->get<PointwiseGroup>();
  const PointwiseGroup* after = nullptr;
  for (const auto& partition : loaded.fusion.partitions)
    for (const auto& g : partition.groups)
      if (g.get<PointwiseGroup>() != nullptr) after = g.get<PointwiseGroup>();
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->coord_dims, before->coord_dims);
  EXPECT_EQ(after->coord_dims, std::vector<int>{1});
  EXPECT_EQ(after->spec.to_string(), before->spec.to_string());
  EXPECT_EQ(after->general.guards.size(), 2u);
  EXPECT_EQ(save_plan(p.graph, planning, loaded), bytes);
}

TEST(PlanArchive, EveryTruncationIsAnError) {
  for (const NamedGraph& named : graphs()) {
    SCOPED_TRACE(named.name);
    const std::shared_ptr<const Graph> graph = build(named);
    const std::string bytes = compile_graph(graph, options(), nullptr)->plan_bytes();
    EXPECT_EQ(load_error(*graph, bytes), "");
    for (std::size_t size = 0; size < bytes.size(); ++size) {
      const std::string message = load_error(*graph, bytes.substr(0, size));
      ASSERT_NE(message.find("saved plan is "), std::string::npos)
          << size << " of " << bytes.size() << " bytes: " << message;
      ASSERT_NE(message.find("truncated"), std::string::npos)
          << size << " of " << bytes.size() << " bytes: " << message;
    }
    expect_error(load_error(*graph, bytes + '\0'), "bytes left after the end");
  }
}

TEST(PlanArchive, ThePipelineRaisesBeforeCompilingAnything) {
  const std::shared_ptr<const Graph> graph = build("pointwise_and_unsupported");
  const std::string bytes = compile_graph(graph, options(), nullptr)->plan_bytes();
  EXPECT_THROW(compile_planned_graph(graph, bytes.substr(0, bytes.size() / 2), options(), nullptr),
               Error);
}

TEST(PlanArchive, AnotherFormatVersionOrNoMagicIsAnError) {
  const std::shared_ptr<const Graph> graph = build("pointwise_and_unsupported");
  const std::string bytes = compile_graph(graph, options(), nullptr)->plan_bytes();
  ASSERT_EQ(bytes.substr(0, 8), "MBPLAN\r\n");
  std::string other = bytes;
  other[8] = static_cast<char>(kPlanFormatVersion + 1);  // the u32 after the magic, little-endian
  expect_error(load_error(*graph, other),
               "has format version " + std::to_string(kPlanFormatVersion + 1) +
                   "; this build reads version " + std::to_string(kPlanFormatVersion));
  other = bytes;
  other[0] = 'X';
  expect_error(load_error(*graph, other), "not a saved plan");
  expect_error(load_error(*graph, ""), "truncated");
}

TEST(PlanArchive, APlanOfAnotherGraphIsAnError) {
  const std::shared_ptr<const Graph> graph = build("pointwise_and_unsupported");
  const std::string bytes = compile_graph(graph, options(), nullptr)->plan_bytes();
  // Other node and value counts.
  expect_error(load_error(*build("reduction"), bytes), "it was made for 4 nodes and 6 values");
  // As many nodes and values, another op.
  GraphBuilder same_size;
  {
    const TensorType t = tensor(F32, {4, 8});
    const ValueId x = same_size.add_input(out(t, "x"));
    const ValueId y = same_size.add_input(out(t, "y"));
    const ValueId m = node1(same_size, "aten::mul.Tensor", {v(x), Argument::of_float(2.0)}, t, "m");
    const ValueId e = node1(same_size, "aten::sin.default", {v(m)}, t, "sin");
    const ValueId a =
        node1(same_size, "aten::add.Tensor", {v(e), v(y), Argument::of_int(1)}, t, "add");
    const ValueId c =
        node1(same_size, "aten::cumsum.default", {v(a), Argument::of_int(1)}, t, "cumsum");
    same_size.set_outputs({v(a), v(c)});
  }
  expect_error(load_error(same_size.build(), bytes), "it was made for another graph");
}

TEST(PlanArchive, APlanMadeUnderOtherOptionsIsAnError) {
  const std::shared_ptr<const Graph> graph = build("pointwise_and_unsupported");
  const std::string bytes = compile_graph(graph, options(), nullptr)->plan_bytes();
  CompileOptions other = options();
  other.fusion.tuning.pw_block = 256;  // as MYBACKEND_PW_BLOCK=256 would
  expect_error(load_error(*graph, bytes, other), "was made under other fusion options");
  other = options();
  other.capability.disabled_ops = {"aten::exp.default"};
  expect_error(load_error(*graph, bytes, other), "other capability options");
  other = options();
  other.partitioner.min_partition_size = 3;
  expect_error(load_error(*graph, bytes, other), "other partitioner options");
  // Codegen and runtime options are the compile's own: the plan does not hold them.
  other = options();
  other.codegen.switched_off.clear();
  other.cuda_graphs.enabled = true;
  EXPECT_EQ(load_error(*graph, bytes, other), "");
}

// A plan whose ids do not fit its graph, saved as it is.
std::string edited_plan(const std::shared_ptr<const Graph>& graph,
                        const std::function<void(CorePlan&)>& edit) {
  CorePlan plan = compile_graph(graph, options(), nullptr)->report();
  edit(plan);
  return save_plan(*graph, options(), plan);
}

KernelGroup& first_group(CorePlan& plan, KernelKind kind) {
  for (PartitionPlan& partition : plan.fusion.partitions)
    for (KernelGroup& group : partition.groups)
      if (group.kind() == kind) return group;
  throw Error("no such group");
}

TEST(PlanArchive, IdsOutOfTheGraphAndWrongNodesAreErrors) {
  const std::shared_ptr<const Graph> graph =
      build("pointwise_and_unsupported");  // 4 nodes, 6 values
  auto error = [&](const std::function<void(CorePlan&)>& edit) {
    return load_error(*graph, edited_plan(graph, edit));
  };
  expect_error(error([](CorePlan& p) { p.fusion.partitions[0].groups[0].nodes.push_back(4); }),
               "node id 4 at byte");
  expect_error(error([](CorePlan& p) { p.fusion.partitions[0].groups[0].nodes.push_back(4); }),
               "is out of range (the graph has 4 nodes)");
  expect_error(error([](CorePlan& p) { p.partitions.dropped.push_back({-7, "?"}); }), "node id -7");
  expect_error(error([](CorePlan& p) {
                 auto group = std::make_shared<PointwiseGroup>(
                     *first_group(p, KernelKind::Pointwise).get<PointwiseGroup>());
                 group->outputs.push_back(6);
                 first_group(p, KernelKind::Pointwise).set(group);
               }),
               "value id 6");
  expect_error(error([](CorePlan& p) { p.decisions.pop_back(); }), "3 decisions for 4 nodes");
  expect_error(error([](CorePlan& p) { p.partitions.partition_of[3] = 0; }),
               "4 nodes are in partition 0, it lists 3");
  expect_error(error([](CorePlan& p) {
                 p.partitions.partition_of[2] = -1;
                 p.partitions.partition_of[3] = 0;
               }),
               "node 2 is listed in partition 0 but is not in it");
  expect_error(error([](CorePlan& p) { p.partitions.schedule[0].index = 9; }), "schedule step 9");
  expect_error(error([](CorePlan& p) { p.fusion.partitions.clear(); }),
               "0 partition plans for 1 partitions");
  // A library group's spec names its node's op.
  const std::shared_ptr<const Graph> linear = build("linear_gelu");
  const std::string moved = edited_plan(linear, [](CorePlan& p) {
    KernelGroup& group = first_group(p, KernelKind::Matmul);
    auto spec = std::make_shared<MatmulSpec>(*group.get<MatmulSpec>());
    spec->product = 0;  // the permute
    group.set(spec);
  });
  expect_error(load_error(*linear, moved), "its matmul group's node 0 is not aten::addmm.default");
}

// ---- the byte format ------------------------------------------------------------

struct Sample {
  std::int8_t small = -3;
  std::uint16_t u16 = 0xBEEF;
  std::int64_t big = std::numeric_limits<std::int64_t>::min();
  std::vector<double> reals;
  std::string text = std::string("nul\0inside", 10);
  std::optional<std::vector<std::string>> maybe;
  std::shared_ptr<const std::pair<int, bool>> shared;
  std::array<std::int32_t, 2> pair{{7, -7}};
  KernelKind kind = KernelKind::Pool;
};

template <class Ar>
void archive(Ar& ar, Sample& s) {
  fields(ar, s.small, s.u16, s.big, s.reals, s.text, s.maybe, s.shared, s.pair, s.kind);
}

TEST(Archive, EveryFieldTypeRoundTripsBitExactly) {
  Sample sample;
  sample.reals = {-0.0,
                  std::numeric_limits<double>::denorm_min(),
                  std::numeric_limits<double>::infinity(),
                  std::numeric_limits<double>::quiet_NaN(),
                  0.1,
                  -1e308};
  std::uint64_t payload = 0x7FF0000000000123ULL;  // a NaN with a payload
  double nan = 0;
  std::memcpy(&nan, &payload, sizeof nan);
  sample.reals.push_back(nan);
  sample.maybe = std::vector<std::string>{"a", ""};
  sample.shared = std::make_shared<const std::pair<int, bool>>(-1, true);
  const std::string bytes = archived(sample);
  Sample loaded;
  loaded.small = 0;
  loaded.text.clear();
  loaded.kind = KernelKind::AtenSequence;
  Reader reader(bytes, "sample");
  archive(reader, loaded);
  reader.finish();
  EXPECT_EQ(archived(loaded), bytes);
  EXPECT_EQ(loaded.small, -3);
  EXPECT_EQ(loaded.big, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(loaded.text, sample.text);
  EXPECT_EQ(loaded.kind, KernelKind::Pool);
  ASSERT_EQ(loaded.reals.size(), sample.reals.size());
  for (std::size_t k = 0; k < sample.reals.size(); ++k)
    EXPECT_EQ(std::memcmp(&loaded.reals[k], &sample.reals[k], sizeof(double)), 0) << k;
  EXPECT_TRUE(std::signbit(loaded.reals[0]));
  ASSERT_TRUE(loaded.shared);
  EXPECT_EQ(*loaded.shared, std::make_pair(-1, true));
  EXPECT_EQ(loaded.maybe, sample.maybe);
}

// What the static_assert on KernelPayload's alternatives rests on
// (fusion/fusion_plan_archive.h): a struct without its function is told apart.
struct NotArchived {
  int field = 0;
};
static_assert(!is_archivable<NotArchived>::value);
static_assert(is_archivable<Sample>::value && is_archivable<PoolGroup>::value &&
              is_archivable<ConvSpec>::value && is_archivable<FusionPlan>::value);

TEST(Archive, IntegersAreLittleEndianAndFixedWidth) {
  std::int32_t value = 0x01020304;
  std::uint16_t half = 0xA0B0;
  Writer writer;
  writer.integer(value);
  writer.integer(half);
  EXPECT_EQ(writer.bytes(), std::string("\x04\x03\x02\x01\xB0\xA0", 6));
}

TEST(Archive, GarbledBytesAreErrors) {
  auto error = [](const std::string& bytes, const std::function<void(Reader&)>& read) {
    Reader reader(bytes, "sample");
    try {
      read(reader);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  bool flag = false;
  expect_error(error("\x02", [&](Reader& r) { r.boolean(flag); }), "a bool (0 or 1) belongs");
  std::uint8_t code = 0;
  expect_error(error("\x0a", [&](Reader& r) { r.below(code, kKernelKindCount, "kernel kind"); }),
               "kernel kind 10 at byte 0 is not below 10");
  std::vector<std::string> strings;
  expect_error(error(std::string("\xFF\xFF\xFF\x00", 4), [&](Reader& r) { archive(r, strings); }),
               "the count 16777215 at byte 0 exceeds the 0 bytes left");
  std::int32_t id = 0;
  expect_error(error(std::string("\x05\x00\x00\x00", 4),
                     [&](Reader& r) {
                       r.limit(IdSpace::Value, 5);
                       r.id(id, IdSpace::Value);
                     }),
               "value id 5 at byte 0 is out of range (the graph has 5 values)");
}

}  // namespace
}  // namespace mybackend
