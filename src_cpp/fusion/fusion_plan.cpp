#include "fusion/fusion_plan.h"

#include <memory>
#include <sstream>

#include "fusion/attention_planner.h"
#include "fusion/claimed_groups.h"
#include "fusion/conv_planner.h"
#include "fusion/graph_index.h"
#include "fusion/matmul_planner.h"
#include "fusion/pointwise_planner.h"
#include "fusion/pool_planner.h"
#include "fusion/reduction_planner.h"
#include "fusion/tuned_specs.h"

namespace mybackend {

std::string FusionPlan::to_string() const {
  std::ostringstream out;
  for (const PartitionPlan& plan : partitions) {
    out << "partition " << std::to_string(plan.partition) << "\n";
    for (const KernelGroup& group : plan.groups) {
      out << "  " << kernel_kind_name(group.kind()) << " nodes=[";
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
  // Built on the first CUDA partition an engine looks at; shared by all.
  std::unique_ptr<GraphIndex> index;
  std::unique_ptr<MatmulPlanner> matmul;
  std::unique_ptr<ConvPlanner> conv;
  std::unique_ptr<PointwisePlanner> pointwise;
  for (std::size_t p = 0; p < partitions.partitions.size(); ++p) {
    PartitionPlan partition_plan;
    partition_plan.partition = static_cast<int>(p);
    const std::vector<int>& nodes = partitions.partitions[p];
    const bool cuda = any_cuda_node(graph, nodes);
    const bool engines =
        cuda && (options.matmul || options.conv || options.generated_kernels || options.attention);
    if (engines && !index) {
      index = std::make_unique<GraphIndex>(graph);
      matmul = std::make_unique<MatmulPlanner>(*index, options.autotune, options.generated_kernels);
      conv = std::make_unique<ConvPlanner>(*index);
      pointwise = std::make_unique<PointwisePlanner>(*index, options);
    }
    // Claiming planners in order (Note [Claimed groups]): attention first
    // (its products and softmax are one cuDNN graph), then products and
    // convolutions, then reductions and norms, then max pools (their
    // prologue is what no reduction took); elementwise groups grow around
    // them.
    ClaimedGroups claimed;
    if (cuda && options.attention)
      claim_attention_groups(*index, nodes, claimed, options.attention_beyond_cudnn_ops);
    if (cuda && options.matmul) matmul->claim(nodes, claimed);
    if (cuda && options.conv) conv->claim(nodes, claimed);
    if (cuda && options.generated_kernels) {
      claim_reduction_groups(*index, nodes, claimed, options.row_epilogues);
      claim_pool_groups(*index, nodes, claimed);
    }
    if (cuda && (options.generated_kernels || !claimed.groups().empty())) {
      partition_plan.groups = pointwise->plan(nodes, claimed);
    } else {
      // CPU partitions (and CUDA ones no engine touches): one ATen sequence,
      // exactly as before the CUDA engines.
      KernelGroup group;  // AtenSequence: no payload
      group.nodes.assign(nodes.begin(), nodes.end());
      group.why = "no generated-kernel engine claims these nodes on this target";
      for (const auto& [node, reason] : claimed.refusals())
        group.why += "; " + graph.node(node).name + ": " + reason;
      partition_plan.groups.push_back(std::move(group));
    }
    plan.partitions.push_back(std::move(partition_plan));
  }
  apply_launch_tuning(plan, options.tuning);  // Note [Tuning in the specs]
  return plan;
}

}  // namespace mybackend
