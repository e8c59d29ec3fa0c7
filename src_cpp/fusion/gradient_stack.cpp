#include "fusion/gradient_stack.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "fusion/ir_match.h"

namespace mybackend {
namespace {

using ir_match::int_arg;
using ir_match::int_list_arg;
using ir_match::normalize_dim;
using ir_match::tensor_arg;

// The view `node` applies to its first argument, normalized against the
// input's rank; nullopt for any other op.
std::optional<StackView> view_step(const Graph& graph, const Node& node) {
  const ValueId in = tensor_arg(graph, node, 0);
  if (in < 0) return std::nullopt;
  const auto rank = static_cast<std::int64_t>(graph.value(in).tensor.rank());
  StackView view;
  if (node.op == "aten::permute.default") {
    const auto order = int_list_arg(node, 1);
    if (!order || static_cast<std::int64_t>(order->size()) != rank) return std::nullopt;
    view.kind = StackView::Kind::Permute;
    for (std::int64_t d : *order) view.dims.push_back(normalize_dim(d, rank));
    std::vector<std::int64_t> sorted = view.dims;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t d = 0; d < rank; ++d)
      if (sorted[static_cast<std::size_t>(d)] != d) return std::nullopt;
    return view;
  }
  if (node.op == "aten::unsqueeze.default") {
    const auto dim = int_arg(node, 1);
    if (!dim) return std::nullopt;
    view.kind = StackView::Kind::Unsqueeze;
    view.dims = {normalize_dim(*dim, rank + 1)};
    if (view.dims[0] < 0 || view.dims[0] > rank) return std::nullopt;
    return view;
  }
  if (node.op == "aten::transpose.int") {
    const auto a = int_arg(node, 1), b = int_arg(node, 2);
    if (!a || !b) return std::nullopt;
    view.kind = StackView::Kind::Transpose;
    view.dims = {normalize_dim(*a, rank), normalize_dim(*b, rank)};
    for (std::int64_t d : view.dims)
      if (d < 0 || d >= rank) return std::nullopt;
    return view;
  }
  return std::nullopt;
}

}  // namespace

GradientStack plan_gradient_stack(const GraphIndex& index, const AttentionSpec& spec,
                                  const std::function<bool(NodeId)>& usable,
                                  std::set<NodeId>& members) {
  const Graph& graph = index.graph;
  GradientStack stack;
  std::set<NodeId> taken;
  NodeId cat = -1;
  const ValueId gradients[3] = {spec.grad_q, spec.grad_k, spec.grad_v};
  for (int g = 0; g < 3; ++g) {
    StackedGradient part;
    part.gradient = g;
    ValueId value = gradients[g];
    while (true) {
      const auto v = static_cast<std::size_t>(value);
      if (value < 0 || index.graph_output[v] || index.readers[v].size() != 1) return {};
      const Node& reader = graph.node(index.readers[v][0]);
      if (!usable(reader.id) || reader.kind != NodeKind::Aten) return {};
      if (reader.op == "aten::cat.default") {
        if (cat >= 0 && cat != reader.id) return {};
        cat = reader.id;
        break;
      }
      const auto view = view_step(graph, reader);
      if (!view || tensor_arg(graph, reader, 0) != value || reader.outputs.empty()) return {};
      part.views.push_back(*view);
      taken.insert(reader.id);
      value = reader.outputs[0];
    }
    part.part = value;
    stack.parts.push_back(std::move(part));
  }
  const Node& node = graph.node(cat);
  if (node.args.empty() || node.args[0].kind != Argument::Kind::List ||
      node.args[0].items.size() != 3 || node.outputs.empty())
    return {};
  // The cat's order; each of the three parts exactly once.
  std::vector<StackedGradient> ordered;
  for (const Argument& item : node.args[0].items) {
    const auto it = std::find_if(stack.parts.begin(), stack.parts.end(), [&](const auto& p) {
      return item.kind == Argument::Kind::Value && p.part == item.value;
    });
    if (it == stack.parts.end()) return {};
    ordered.push_back(std::move(*it));
    stack.parts.erase(it);
  }
  const auto rank = static_cast<std::int64_t>(graph.value(node.outputs[0]).tensor.rank());
  const auto dim = node.args.size() > 1 ? int_arg(node, 1) : std::optional<std::int64_t>(0);
  if (!dim) return {};
  stack.dim = normalize_dim(*dim, rank);
  if (stack.dim < 0 || stack.dim >= rank) return {};
  stack.value = node.outputs[0];
  stack.parts = std::move(ordered);
  members.insert(taken.begin(), taken.end());
  members.insert(cat);
  return stack;
}

}  // namespace mybackend
