// Graph-wide adjacency the fusion planners share: built once per graph,
// read by every partition's planning.
#pragma once

#include <set>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

struct GraphIndex {
  explicit GraphIndex(const Graph& graph);

  // Is `value` read by a node outside `members`, or returned by the graph?
  bool used_outside(ValueId value, const std::set<NodeId>& members) const;
  // No path leaves `members` and re-enters it (the group can run as one
  // step without a cycle through the nodes around it).
  bool convex(const std::set<NodeId>& members) const;

  const Graph& graph;
  std::vector<std::vector<NodeId>> producers;  // per node
  std::vector<std::vector<NodeId>> users;      // per node
  std::vector<std::vector<NodeId>> readers;    // per value: nodes that read it
  std::vector<bool> graph_output;              // per value
};

}  // namespace mybackend
