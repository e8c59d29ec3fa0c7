#include "fusion/graph_index.h"

#include <algorithm>

namespace mybackend {

GraphIndex::GraphIndex(const Graph& g)
    : graph(g),
      producers(g.node_producers()),
      users(g.node_users()),
      readers(g.values().size()),
      graph_output(g.values().size(), false) {
  for (const Node& node : g.nodes()) {
    for (ValueId v : node.input_values()) {
      auto& list = readers[static_cast<std::size_t>(v)];
      if (list.empty() || list.back() != node.id) list.push_back(node.id);
    }
  }
  for (const Argument& out : g.outputs())
    out.for_each_value([&](ValueId v) { graph_output[static_cast<std::size_t>(v)] = true; });
}

bool GraphIndex::used_outside(ValueId value, const std::set<NodeId>& members) const {
  if (graph_output[static_cast<std::size_t>(value)]) return true;
  for (NodeId reader : readers[static_cast<std::size_t>(value)]) {
    if (members.count(reader) == 0) return true;
  }
  return false;
}

bool GraphIndex::convex(const std::set<NodeId>& members) const {
  if (members.empty()) return true;
  // Node ids are topological: nothing after the last member can lead back.
  const NodeId last = *members.rbegin();
  std::vector<bool> seen(users.size(), false);
  std::vector<NodeId> stack;
  for (NodeId m : members) {
    for (NodeId u : users[static_cast<std::size_t>(m)]) {
      if (members.count(u) == 0 && u < last) stack.push_back(u);
    }
  }
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (seen[static_cast<std::size_t>(n)]) continue;
    seen[static_cast<std::size_t>(n)] = true;
    for (NodeId u : users[static_cast<std::size_t>(n)]) {
      if (members.count(u)) return false;
      if (u < last) stack.push_back(u);
    }
  }
  return true;
}

}  // namespace mybackend
