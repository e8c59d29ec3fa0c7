#include "fusion/fusion_plan.h"

#include <sstream>

#include "fusion/graph_index.h"
#include "fusion/pointwise_planner.h"
#include "fusion/reduction_planner.h"

namespace mybackend {

std::string_view kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::AtenSequence: return "aten_sequence";
    case KernelKind::Pointwise: return "pointwise";
    case KernelKind::Reduction: return "reduction";
    case KernelKind::Norm: return "norm";
  }
  return "unknown";
}

std::string FusionPlan::to_string() const {
  std::ostringstream out;
  for (const PartitionPlan& plan : partitions) {
    out << "partition " << std::to_string(plan.partition) << "\n";
    for (const KernelGroup& group : plan.groups) {
      out << "  " << kernel_kind_name(group.kind) << " nodes=[";
      for (std::size_t k = 0; k < group.nodes.size(); ++k)
        out << (k ? "," : "") << std::to_string(group.nodes[k]);
      out << "]\n";
      std::istringstream lines(group.spec);
      for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
    }
  }
  return out.str();
}

namespace {

bool any_cuda_node(const Graph& graph, const std::vector<int>& nodes) {
  for (NodeId id : nodes) {
    for (ValueId v : graph.node(id).outputs) {
      const Value& value = graph.value(v);
      if (value.kind == ValueKind::Tensor && value.tensor.device.type == DeviceType::CUDA)
        return true;
    }
  }
  return false;
}

}  // namespace

FusionPlan plan_fusion(const Graph& graph, const PartitionResult& partitions,
                       const FusionOptions& options) {
  FusionPlan plan;
  plan.partitions.reserve(partitions.partitions.size());
  std::unique_ptr<PointwisePlanner> pointwise;
  std::unique_ptr<GraphIndex> index;
  for (std::size_t p = 0; p < partitions.partitions.size(); ++p) {
    PartitionPlan partition_plan;
    partition_plan.partition = static_cast<int>(p);
    const std::vector<int>& nodes = partitions.partitions[p];
    if (options.generated_kernels && any_cuda_node(graph, nodes)) {
      if (!pointwise) {
        pointwise = std::make_unique<PointwisePlanner>(graph, options);
        index = std::make_unique<GraphIndex>(graph);
      }
      // Reductions and norms first; elementwise groups grow around them.
      partition_plan.groups = pointwise->plan(nodes, claim_reduction_groups(*index, nodes));
    } else {
      // CPU partitions: one ATen sequence, exactly as before the CUDA engines.
      KernelGroup group;
      group.kind = KernelKind::AtenSequence;
      group.nodes.assign(nodes.begin(), nodes.end());
      group.why = "no generated-kernel engine claims these nodes on this target";
      partition_plan.groups.push_back(std::move(group));
    }
    plan.partitions.push_back(std::move(partition_plan));
  }
  return plan;
}

}  // namespace mybackend
