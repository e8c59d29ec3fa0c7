#include "fusion/ir_match.h"

#include <algorithm>

namespace mybackend::ir_match {

ValueId tensor_arg(const Graph& graph, const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::Value) return -1;
  const ValueId v = node.args[index].value;
  return graph.value(v).kind == ValueKind::Tensor ? v : -1;
}

std::optional<double> scalar(const Argument& arg) {
  if (arg.kind == Argument::Kind::Int) return static_cast<double>(arg.i);
  if (arg.kind == Argument::Kind::Float) return arg.f;
  if (arg.kind == Argument::Kind::Bool) return arg.b ? 1.0 : 0.0;
  return std::nullopt;
}

std::optional<double> scalar_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size()) return std::nullopt;
  return scalar(node.args[index]);
}

std::optional<bool> bool_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::Bool)
    return std::nullopt;
  return node.args[index].b;
}

std::optional<std::int64_t> int_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::Int)
    return std::nullopt;
  return node.args[index].i;
}

std::optional<std::vector<std::int64_t>> int_list_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::List)
    return std::nullopt;
  std::vector<std::int64_t> out;
  for (const Argument& item : node.args[index].items) {
    if (item.kind != Argument::Kind::Int) return std::nullopt;
    out.push_back(item.i);
  }
  return out;
}

bool none_arg(const Node& node, std::size_t index) {
  return index >= node.args.size() || node.args[index].kind == Argument::Kind::None;
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

bool swaps_last_two_dims(const Graph& graph, const Node& node) {
  if (node.kind != NodeKind::Aten) return false;
  const ValueId in = tensor_arg(graph, node, 0);
  if (in < 0) return false;
  const std::int64_t rank = graph.value(in).tensor.rank();
  if (rank < 2) return false;
  if (node.op == "aten::t.default") return rank == 2;
  if (node.op == "aten::transpose.int") {
    const auto d0 = int_arg(node, 1), d1 = int_arg(node, 2);
    if (!d0 || !d1) return false;
    const std::int64_t a = normalize_dim(*d0, rank), b = normalize_dim(*d1, rank);
    return std::min(a, b) == rank - 2 && std::max(a, b) == rank - 1;
  }
  if (node.op == "aten::permute.default") {
    const auto dims = int_list_arg(node, 1);
    if (!dims || static_cast<std::int64_t>(dims->size()) != rank) return false;
    for (std::int64_t d = 0; d < rank; ++d) {
      const std::int64_t want = d < rank - 2 ? d : (d == rank - 2 ? rank - 1 : rank - 2);
      if (normalize_dim((*dims)[static_cast<std::size_t>(d)], rank) != want) return false;
    }
    return true;
  }
  return false;
}

bool is_shape_view(const Node& node) {
  return node.kind == NodeKind::Aten &&
         (node.op == "aten::view.default" || node.op == "aten::_unsafe_view.default" ||
          node.op == "aten::reshape.default");
}

bool is_dtype_cast(const Graph& graph, const Node& node) {
  if (node.op != "aten::_to_copy.default" && node.op != "prims::convert_element_type.default")
    return false;
  if (node.args.empty() || node.args[0].kind != Argument::Kind::Value || node.outputs.size() != 1)
    return false;
  const Value& in = graph.value(node.args[0].value);
  const Value& out = graph.value(node.outputs[0]);
  return in.kind == ValueKind::Tensor && out.kind == ValueKind::Tensor &&
         in.tensor.dtype != out.tensor.dtype;
}

std::vector<NodeId> views_then_cast(const GraphIndex& index, ValueId value,
                                    const std::function<bool(NodeId)>& usable) {
  const Graph& graph = index.graph;
  const Dim last = graph.value(value).tensor.sizes.back();
  std::vector<NodeId> chain;
  ValueId current = value;
  while (true) {
    const auto& readers = index.readers[static_cast<std::size_t>(current)];
    if (index.graph_output[static_cast<std::size_t>(current)] || readers.size() != 1 ||
        !usable(readers[0]))
      return {};
    const Node& user = graph.node(readers[0]);
    if (user.outputs.size() != 1 || tensor_arg(graph, user, 0) != current) return {};
    const TensorType& out = graph.value(user.outputs[0]).tensor;
    if (out.rank() == 0 || !same_dim(out.sizes.back(), last)) return {};
    chain.push_back(user.id);
    current = user.outputs[0];
    if (is_shape_view(user)) continue;
    if (!is_dtype_cast(graph, user) || !out.is_contiguous()) return {};
    return chain;
  }
}

bool same_dim(const Dim& a, const Dim& b) { return a.str() == b.str(); }

bool same_shape(const TensorType& a, const TensorType& b) {
  if (a.rank() != b.rank()) return false;
  for (std::size_t d = 0; d < a.sizes.size(); ++d) {
    if (!same_dim(a.sizes[d], b.sizes[d])) return false;
  }
  return true;
}

bool same_strides(const TensorType& a, const TensorType& b) {
  if (a.rank() != b.rank()) return false;
  for (std::size_t d = 0; d < a.strides.size(); ++d) {
    if (!same_dim(a.strides[d], b.strides[d])) return false;
  }
  return true;
}

}  // namespace mybackend::ir_match
