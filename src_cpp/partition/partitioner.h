// Stage 6: group the nodes the capability registry accepted into partitions.
//
// Note [Partition contract] (the contract of torch.fx's CapabilityBasedPartitioner)
//  * every supported node is in exactly one partition, or is reported as
//    dropped with a reason (see below); no unsupported node is in one;
//  * contracting every partition into one node leaves the graph acyclic;
//  * partitions are grown greedily as far as that rule allows: no two
//    partitions joined by an edge can be merged without creating a cycle;
//    partitions joined by no edge are merged too when no path links them
//    (torch's partitioner does the same), in a sweep over node order;
//  * a partition made only of view/shape nodes is dropped (it would only add
//    a boundary), as is one with fewer than min_partition_size nodes, or a
//    single node when allow_single_node_partition is false;
//  * the result depends on nothing but the input: same graph, same output.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

// The graph as the partitioner sees it: nodes 0..n-1 in a topological order.
struct PartitionerInput {
  std::vector<std::vector<int>> producers;  // producers[i]: nodes whose outputs node i reads (< i)
  std::vector<bool> supported;              // accepted by the capability registry
  std::vector<bool> view_only;              // computes nothing (view/shape/metadata ops)
};

struct PartitionerOptions {
  int min_partition_size = 1;
  bool allow_single_node_partition = true;
};

struct DroppedNode {
  int node = 0;
  std::string reason;
};

// One entry of the execution schedule: a whole partition, or one node that
// runs outside every partition. Steps are in a topological order of the
// contracted graph.
struct ScheduleStep {
  bool is_partition = false;
  int index = 0;  // partition index, or node id
};

struct PartitionResult {
  std::vector<int> partition_of;             // per node: partition index, or -1
  std::vector<std::vector<int>> partitions;  // node ids, ascending, per partition
  std::vector<DroppedNode> dropped;          // supported nodes left out, with the reason
  std::vector<ScheduleStep> schedule;        // every partition and every other node, once
};

PartitionResult partition_dag(const PartitionerInput& input, const PartitionerOptions& options);

// Convenience over the IR: producers come from the graph's value uses.
PartitionResult partition_graph(const Graph& graph, const std::vector<bool>& supported,
                                const std::vector<bool>& view_only,
                                const PartitionerOptions& options);

}  // namespace mybackend
