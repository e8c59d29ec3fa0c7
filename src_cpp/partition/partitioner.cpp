#include "partition/partitioner.h"

#include "common/error.h"
#include "partition/partition_steps.h"

namespace mybackend {
namespace {

void check_input(const PartitionerInput& input) {
  const std::size_t n = input.producers.size();
  MB_CHECK(input.supported.size() == n, "partitioner input: 'supported' has ",
           input.supported.size(), " entries but the graph has ", n, " nodes");
  MB_CHECK(input.view_only.size() == n, "partitioner input: 'view_only' has ",
           input.view_only.size(), " entries but the graph has ", n, " nodes");
  for (std::size_t i = 0; i < n; ++i) {
    for (int p : input.producers[i]) {
      MB_CHECK(p >= 0 && static_cast<std::size_t>(p) < i, "partitioner input: node ", i,
               " reads node ", p, ", but a node may only read earlier nodes ",
               "(nodes must be numbered in topological order)");
    }
  }
}

}  // namespace

PartitionResult partition_dag(const PartitionerInput& input, const PartitionerOptions& options) {
  check_input(input);
  PartitionResult result;
  const std::vector<int> cluster = partition_detail::merge_supported_nodes(input);
  partition_detail::select_partitions(input, options, cluster, result);
  result.schedule = partition_detail::schedule_steps(input.producers, result);
  return result;
}

PartitionResult partition_graph(const Graph& graph, const std::vector<bool>& supported,
                                const std::vector<bool>& view_only,
                                const PartitionerOptions& options) {
  const std::size_t n = graph.nodes().size();
  MB_CHECK(supported.size() == n, "partition_graph: 'supported' has ", supported.size(),
           " entries but the graph has ", n, " nodes (one capability decision per node)");
  MB_CHECK(view_only.size() == n, "partition_graph: 'view_only' has ", view_only.size(),
           " entries but the graph has ", n, " nodes");
  PartitionerInput input{graph.node_producers(), supported, view_only};
  return partition_dag(input, options);
}

}  // namespace mybackend
