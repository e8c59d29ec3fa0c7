// Hand-built IR graphs for the fusion planner tests (pointwise, reduction,
// matmul), and plan(), which runs partitioning and fusion planning
// (generated kernels and matmul groups on unless told otherwise) and checks
// that every partition's groups cover it exactly once in a valid order.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"

namespace mybackend {
namespace {

TensorType tensor(DType dtype, std::vector<std::int64_t> sizes, const char* device = "cuda:0") {
  TensorType t;
  t.dtype = dtype;
  t.device = Device::parse(device);
  std::int64_t stride = 1;
  t.strides.assign(sizes.size(), Dim(1));
  for (std::size_t d = sizes.size(); d-- > 0;) {
    t.strides[d] = Dim(stride);
    stride *= sizes[d];
  }
  for (auto s : sizes) t.sizes.emplace_back(s);
  return t;
}

// A [N, C, H, W] tensor laid out channels-last (NHWC) or contiguous.
[[maybe_unused]] TensorType nchw(DType dtype, std::vector<std::int64_t> sizes, bool channels_last) {
  TensorType t = tensor(dtype, sizes);
  if (channels_last) {
    const std::int64_t c = sizes[1], h = sizes[2], w = sizes[3];
    t.strides = {Dim(h * w * c), Dim(1), Dim(w * c), Dim(c)};
  }
  return t;
}

GraphBuilder::OutputSpec out(const TensorType& t, const std::string& name = {}) {
  return {ValueKind::Tensor, t, std::nullopt, name};
}

Argument v(ValueId id) { return Argument::of_value(id); }

[[maybe_unused]] Argument ints(std::vector<std::int64_t> values) {
  std::vector<Argument> items;
  for (auto x : values) items.push_back(Argument::of_int(x));
  return Argument::of_list(std::move(items));
}

// An ATen node of one tensor output; returns that output. (Not every test
// builds its graphs node by node.)
[[maybe_unused]] ValueId node1(GraphBuilder& b, const char* op, std::vector<Argument> args,
                               const TensorType& t, const char* name) {
  return b.add_node(NodeKind::Aten, op, std::move(args), {out(t)}, name)[0];
}

// The defaults with generated kernels on (matmul groups are on by default).
FusionOptions generated_options() {
  FusionOptions options;
  options.generated_kernels = true;
  return options;
}

// The pointwise planner's own grouping around reductions (MYBACKEND_ROW_EPILOGUES=0).
[[maybe_unused]] FusionOptions without_row_epilogues() {
  FusionOptions options = generated_options();
  options.row_epilogues = false;
  return options;
}

struct Planned {
  Graph graph;
  FusionPlan plan;
  std::vector<const KernelGroup*> groups(KernelKind kind) const {
    std::vector<const KernelGroup*> found;
    for (const auto& p : plan.partitions) {
      for (const auto& g : p.groups) {
        if (g.kind() == kind) found.push_back(&g);
      }
    }
    return found;
  }
};

// Every group's why, a line each: the refusals of claiming planners show
// up in the aten_sequence groups' whys.
[[maybe_unused]] std::string all_whys(const Planned& p) {
  std::string text;
  for (const auto& partition : p.plan.partitions) {
    for (const auto& g : partition.groups) text += g.why + "\n";
  }
  return text;
}

Planned plan(GraphBuilder& builder, const FusionOptions& options = generated_options()) {
  Planned result{builder.build(), {}};
  std::vector<bool> supported(result.graph.nodes().size(), true);
  std::vector<bool> view_only(result.graph.nodes().size(), false);
  PartitionResult partitions = partition_graph(result.graph, supported, view_only, {});
  result.plan = plan_fusion(result.graph, partitions, options);
  // Every partition's groups cover it exactly once, in a valid order.
  for (std::size_t p = 0; p < partitions.partitions.size(); ++p) {
    std::set<NodeId> seen;
    std::set<ValueId> ready;
    for (ValueId in : result.graph.inputs()) ready.insert(in);
    for (const auto& node : result.graph.nodes()) {
      if (partitions.partition_of[static_cast<std::size_t>(node.id)] != static_cast<int>(p)) {
        for (ValueId o : node.outputs) ready.insert(o);  // other steps: treat as available
      }
    }
    for (const auto& g : result.plan.partitions[p].groups) {
      std::set<ValueId> produced;
      for (NodeId n : g.nodes) {
        EXPECT_TRUE(seen.insert(n).second) << "node " << n << " planned twice";
        for (ValueId in : result.graph.node(n).input_values()) {
          EXPECT_TRUE(ready.count(in) || produced.count(in))
              << "node " << n << " reads value " << in << " before it is computed";
        }
        for (ValueId o : result.graph.node(n).outputs) produced.insert(o);
      }
      ready.insert(produced.begin(), produced.end());
    }
    EXPECT_EQ(seen.size(), partitions.partitions[p].size());
  }
  return result;
}

}  // namespace
}  // namespace mybackend
