#include "fusion/row_epilogue.h"

#include <algorithm>
#include <queue>

#include "fusion/pointwise_planner.h"
#include "fusion/prologue.h"

namespace mybackend {

bool keeps_rows(const TensorType& t, const TensorType& in, const std::vector<int>& reduced) {
  if (t.rank() != in.rank() || t.device != in.device) return false;
  for (std::size_t d = 0; d < in.sizes.size(); ++d) {
    const bool is_reduced = std::binary_search(reduced.begin(), reduced.end(), static_cast<int>(d));
    if (is_reduced) {
      if (!t.sizes[d].is_static() || t.sizes[d].static_value() != 1) return false;
    } else if (t.sizes[d].str() != in.sizes[d].str()) {
      return false;
    }
  }
  return true;
}

bool is_row_view(const Graph& graph, const Node& node, const TensorType& in,
                 const std::vector<int>& reduced, const std::set<ValueId>& row_values) {
  static const std::set<std::string> kReshapes = {
      "aten::view.default", "aten::_unsafe_view.default", "aten::unsqueeze.default"};
  if (node.kind != NodeKind::Aten || node.outputs.size() != 1 || node.args.empty()) return false;
  const Argument& base = node.args[0];
  if (base.kind != Argument::Kind::Value || !row_values.count(base.value)) return false;
  const Value& out = graph.value(node.outputs[0]);
  if (out.kind != ValueKind::Tensor) return false;
  if (node.op == "aten::expand.default") {
    return keeps_rows(graph.value(base.value).tensor, in, reduced) &&
           shape_key(out.tensor) == shape_key(in) && out.tensor.device == in.device;
  }
  return kReshapes.count(node.op) > 0 && keeps_rows(out.tensor, in, reduced);
}

std::vector<NodeId> take_row_epilogue(const GraphIndex& index, ValueId input,
                                      const std::vector<int>& reduced,
                                      const std::vector<ValueId>& results,
                                      const std::function<bool(NodeId)>& available,
                                      std::set<NodeId>& members) {
  const Graph& graph = index.graph;
  const TensorType& in = graph.value(input).tensor;
  const std::string key = space_key(in);
  std::set<ValueId> row_values(results.begin(), results.end());
  std::set<ValueId> broadcasts;
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> pending;
  for (ValueId v : results)
    for (NodeId u : index.readers[static_cast<std::size_t>(v)]) pending.push(u);
  // An operand the row epilogue can read: computed outside the group, or
  // one value a row, or of the input space.
  auto readable = [&](ValueId v) {
    const NodeId p = graph.value(v).producer;
    if (p < 0 || !members.count(p)) return true;
    if (row_values.count(v)) return keeps_rows(graph.value(v).tensor, in, reduced);
    return broadcasts.count(v) > 0 || space_key(graph.value(v).tensor) == key;
  };
  std::vector<NodeId> taken;
  bool any_elementwise = false;
  auto take = [&](NodeId u) {
    std::set<NodeId> trial = members;
    trial.insert(u);
    if (!index.convex(trial)) return false;
    members.swap(trial);
    taken.push_back(u);
    return true;
  };
  while (!pending.empty()) {
    const NodeId u = pending.top();
    pending.pop();
    if (!available(u) || members.count(u)) continue;
    const Node& node = graph.node(u);
    if (is_row_view(graph, node, in, reduced, row_values)) {
      if (!take(u)) continue;
      const ValueId out = node.outputs[0];
      (node.op == "aten::expand.default" ? broadcasts : row_values).insert(out);
      for (NodeId next : index.readers[static_cast<std::size_t>(out)]) pending.push(next);
      continue;
    }
    if (!elementwise_of_space(graph, node, key)) continue;
    bool ok = true;
    for (const Argument& a : node.args) {
      if (a.kind == Argument::Kind::Value && graph.value(a.value).kind == ValueKind::Tensor)
        ok = ok && readable(a.value);
    }
    if (!ok || !take(u)) continue;
    any_elementwise = true;
    for (NodeId next : index.users[static_cast<std::size_t>(u)]) pending.push(next);
  }
  if (!any_elementwise) {  // only views taken: nothing reads the rows
    for (NodeId n : taken) members.erase(n);
    return {};
  }
  take_operand_producers(index, key, available, members, taken, kMaxRowOperandProducers);
  std::sort(taken.begin(), taken.end());
  return taken;
}

}  // namespace mybackend
