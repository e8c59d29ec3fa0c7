// Reading an aten node's arguments and comparing IR shapes: what the
// claiming planners (matmul_planner.h, conv_planner.h) share. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace mybackend::node_args {

// A number known at compile time (Int, Float or Bool argument).
inline std::optional<double> scalar(const Argument& arg) {
  if (arg.kind == Argument::Kind::Int) return static_cast<double>(arg.i);
  if (arg.kind == Argument::Kind::Float) return arg.f;
  if (arg.kind == Argument::Kind::Bool) return arg.b ? 1.0 : 0.0;
  return std::nullopt;
}

// The tensor value argument `index` names, or -1.
inline ValueId tensor_arg(const Graph& graph, const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::Value) return -1;
  const ValueId v = node.args[index].value;
  return graph.value(v).kind == ValueKind::Tensor ? v : -1;
}

inline std::optional<std::int64_t> int_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::Int)
    return std::nullopt;
  return node.args[index].i;
}

// An int list whose items are all compile-time ints (no SymInt values).
inline std::optional<std::vector<std::int64_t>> int_list_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::List)
    return std::nullopt;
  std::vector<std::int64_t> out;
  for (const Argument& item : node.args[index].items) {
    if (item.kind != Argument::Kind::Int) return std::nullopt;
    out.push_back(item.i);
  }
  return out;
}

inline std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

inline bool same_dim(const Dim& a, const Dim& b) { return a.str() == b.str(); }

inline bool same_shape(const TensorType& a, const TensorType& b) {
  if (a.rank() != b.rank()) return false;
  for (std::size_t d = 0; d < a.sizes.size(); ++d) {
    if (!same_dim(a.sizes[d], b.sizes[d])) return false;
  }
  return true;
}

}  // namespace mybackend::node_args
