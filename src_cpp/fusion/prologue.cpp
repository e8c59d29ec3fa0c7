#include "fusion/prologue.h"

#include <algorithm>
#include <queue>

#include "fusion/pointwise_lowering.h"
#include "fusion/pointwise_planner.h"

namespace mybackend {

std::string space_key(const TensorType& t) { return shape_key(t) + "@" + t.device.str(); }

bool elementwise_of_space(const Graph& graph, const Node& node, const std::string& key) {
  if (!pointwise_candidate_problem(graph, node).empty()) return false;
  return space_key(graph.value(node.outputs[0]).tensor) == key;
}

std::vector<NodeId> elementwise_prologue(const GraphIndex& index, ValueId value,
                                         const std::function<bool(NodeId)>& available,
                                         std::set<NodeId>& members) {
  const Graph& graph = index.graph;
  const std::string key = space_key(graph.value(value).tensor);
  std::priority_queue<NodeId> pending;  // highest id first: users before producers
  if (graph.value(value).producer >= 0) pending.push(graph.value(value).producer);
  std::vector<NodeId> prologue;
  while (!pending.empty()) {
    const NodeId p = pending.top();
    pending.pop();
    if (!available(p) || members.count(p)) continue;
    const Node& node = graph.node(p);
    if (!elementwise_of_space(graph, node, key)) continue;
    if (index.used_outside(node.outputs[0], members)) continue;
    members.insert(p);
    prologue.push_back(p);
    for (NodeId q : index.producers[static_cast<std::size_t>(p)]) pending.push(q);
  }
  std::sort(prologue.begin(), prologue.end());
  return prologue;
}

std::string prologue_spec(const Graph& graph, const std::vector<NodeId>& nodes, ValueId value,
                          DType dtype, PointwiseSpec* spec, std::vector<ValueId>* inputs) {
  // The value in its logical dtype: eager rounds the producers' results
  // before the reading op sees them.
  PointwiseSsa ssa(graph);
  for (NodeId id : nodes) {
    if (std::string p = ssa.add_node(graph.node(id)); !p.empty())
      return graph.node(id).name + ": " + p;
  }
  PointwiseSpec& built = ssa.spec();
  std::int32_t result = ssa.logical(value);
  if (built.instrs[static_cast<std::size_t>(result)].dtype != dtype) {
    built.instrs.push_back(PwInstr{PwOp::Cast, dtype, {result}, -1});
    result = static_cast<std::int32_t>(built.instrs.size() - 1);
  }
  built.outputs.push_back(PwOutput{TensorArg{dtype, IndexMode::Contiguous, 0}, result});
  built.rank = static_cast<int>(graph.value(value).tensor.rank());
  *inputs = ssa.inputs();
  *spec = std::move(built);
  return {};
}

void take_operand_producers(const GraphIndex& index, const std::string& key,
                            const std::function<bool(NodeId)>& available, std::set<NodeId>& members,
                            std::vector<NodeId>& taken, std::size_t limit) {
  const Graph& graph = index.graph;
  std::priority_queue<NodeId> pending;  // highest id first: readers before producers
  for (NodeId u : taken)
    for (NodeId p : index.producers[static_cast<std::size_t>(u)]) pending.push(p);
  std::size_t added = 0;
  while (!pending.empty() && added < limit) {
    const NodeId p = pending.top();
    pending.pop();
    if (!available(p) || members.count(p)) continue;
    const Node& node = graph.node(p);
    if (node.outputs.size() != 1 || !elementwise_of_space(graph, node, key)) continue;
    if (index.used_outside(node.outputs[0], members)) continue;
    std::set<NodeId> trial = members;
    trial.insert(p);
    if (!index.convex(trial)) continue;
    members.swap(trial);
    taken.push_back(p);
    ++added;
    for (NodeId q : index.producers[static_cast<std::size_t>(p)]) pending.push(q);
  }
}

std::vector<NodeId> elementwise_epilogue(const GraphIndex& index, ValueId value,
                                         const std::function<bool(NodeId)>& available,
                                         std::set<NodeId>& members, bool operand_producers) {
  const Graph& graph = index.graph;
  const std::string key = space_key(graph.value(value).tensor);
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> pending;
  for (NodeId u : index.readers[static_cast<std::size_t>(value)]) pending.push(u);
  std::vector<NodeId> taken;
  while (!pending.empty()) {
    const NodeId u = pending.top();
    pending.pop();
    if (!available(u) || members.count(u)) continue;
    if (!elementwise_of_space(graph, graph.node(u), key)) continue;
    std::set<NodeId> trial = members;
    trial.insert(u);
    if (!index.convex(trial)) continue;
    members.swap(trial);
    taken.push_back(u);
    for (NodeId next : index.users[static_cast<std::size_t>(u)]) pending.push(next);
  }
  if (operand_producers && !taken.empty())
    take_operand_producers(index, key, available, members, taken);
  std::sort(taken.begin(), taken.end());
  return taken;
}

}  // namespace mybackend
