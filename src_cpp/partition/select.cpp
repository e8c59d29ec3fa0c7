#include <algorithm>
#include <string>

#include "partition/partition_steps.h"

namespace mybackend::partition_detail {
namespace {

// The first drop rule a cluster breaks, as the reason reported for each of
// its nodes; empty when the cluster is kept.
std::string drop_reason(const std::vector<int>& nodes, const PartitionerInput& input,
                        const PartitionerOptions& options) {
  const bool only_views = std::all_of(nodes.begin(), nodes.end(),
                                      [&](int n) { return static_cast<bool>(input.view_only[n]); });
  // A view-only partition computes nothing; it would only add a boundary.
  if (only_views) return "partition holds only view/shape ops";
  const int size = static_cast<int>(nodes.size());
  if (size < options.min_partition_size) {
    return "partition of " + std::to_string(size) + (size == 1 ? " node" : " nodes") +
           " is smaller than min_partition_size=" + std::to_string(options.min_partition_size);
  }
  if (size == 1 && !options.allow_single_node_partition) {
    return "single-node partition while allow_single_node_partition=false";
  }
  return {};
}

}  // namespace

void select_partitions(const PartitionerInput& input, const PartitionerOptions& options,
                       const std::vector<int>& cluster, PartitionResult& result) {
  const int n = static_cast<int>(cluster.size());
  std::vector<std::vector<int>> members(n);  // by cluster id; ascending since nodes go in order
  for (int i = 0; i < n; ++i) {
    if (cluster[i] >= 0) members[cluster[i]].push_back(i);
  }

  result.partition_of.assign(n, -1);
  result.partitions.clear();
  result.dropped.clear();
  // Visiting clusters at their smallest node numbers partitions by it. A
  // kept cluster's list is moved out, hence the emptiness check.
  for (int i = 0; i < n; ++i) {
    if (cluster[i] < 0) continue;
    std::vector<int>& nodes = members[cluster[i]];
    if (nodes.empty() || nodes.front() != i) continue;
    std::string reason = drop_reason(nodes, input, options);
    if (!reason.empty()) {
      for (int node : nodes) result.dropped.push_back({node, reason});
      continue;
    }
    const int index = static_cast<int>(result.partitions.size());
    for (int node : nodes) result.partition_of[node] = index;
    result.partitions.push_back(std::move(nodes));
  }
  std::sort(result.dropped.begin(), result.dropped.end(),
            [](const DroppedNode& x, const DroppedNode& y) { return x.node < y.node; });
}

}  // namespace mybackend::partition_detail
