// The partitioner's pipeline, one step per file; partitioner.cpp runs them.
// Internal to src_cpp/partition/.
#pragma once

#include <vector>

#include "partition/partitioner.h"

namespace mybackend::partition_detail {

// greedy_merge.cpp: merges supported nodes along edges until no merge is left
// that keeps the contracted graph acyclic. Returns, per node, the id of its
// cluster (a node id), or -1 for unsupported nodes.
std::vector<int> merge_supported_nodes(const PartitionerInput& input);

// select.cpp: applies the drop rules to the clusters and numbers the
// survivors by their smallest node. Fills partition_of, partitions, dropped.
void select_partitions(const PartitionerInput& input, const PartitionerOptions& options,
                       const std::vector<int>& cluster, PartitionResult& result);

// schedule.cpp: orders partitions and the remaining nodes topologically.
std::vector<ScheduleStep> schedule_steps(const std::vector<std::vector<int>>& producers,
                                         const PartitionResult& result);

}  // namespace mybackend::partition_detail
