#include "fusion/fusion_plan.h"

namespace mybackend {

std::string_view kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::AtenSequence: return "aten_sequence";
  }
  return "unknown";
}

FusionPlan plan_fusion(const Graph& graph, const PartitionResult& partitions) {
  FusionPlan plan;
  plan.partitions.reserve(partitions.partitions.size());
  for (std::size_t p = 0; p < partitions.partitions.size(); ++p) {
    PartitionPlan partition_plan;
    partition_plan.partition = static_cast<int>(p);
    KernelGroup group;
    group.kind = KernelKind::AtenSequence;
    group.nodes.assign(partitions.partitions[p].begin(), partitions.partitions[p].end());
    group.why = "no generated-kernel engine claims these nodes on this target";
    partition_plan.groups.push_back(std::move(group));
    plan.partitions.push_back(std::move(partition_plan));
  }
  return plan;
}

}  // namespace mybackend
