#include "fusion/norm_prologue.h"

#include <algorithm>
#include <set>
#include <vector>

#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"
#include "fusion/prologue.h"

namespace mybackend {

namespace {

// Note [A norm prologue read elsewhere]: the elementwise node computing x
// (or the contiguous tensor x is a shape view of), when the norm may take it
// alone; the kernel computes `computed` and stores it as `stored` (the same
// elements: x or the tensor it views, whichever has readers outside).
// producer -1 when none qualifies.
struct StoredProducer {
  NodeId producer = -1;
  NodeId view = -1;  // the shape view between, or -1
  ValueId computed = -1;
  ValueId stored = -1;  // -1 when nothing outside reads the value
};

StoredProducer stored_producer(const GraphIndex& index,
                               const std::function<bool(NodeId)>& available,
                               const std::set<NodeId>& members, ValueId x) {
  const Graph& graph = index.graph;
  if (!likely_contiguous(graph.value(x).tensor)) return {};
  ValueId computed = x, stored = x;
  NodeId producer = graph.value(x).producer;
  NodeId view = -1;
  // Through one shape view of a contiguous tensor (Swin sums its residual
  // on [B, H, W, C] and normalizes it as [B, H * W, C]): the same elements
  // at the same offsets, so the kernel's loads and stores line up with the
  // producer's. One of the two may have readers outside, not both.
  if (producer >= 0 && ir_match::is_shape_view(graph.node(producer)) && available(producer) &&
      members.count(producer) == 0) {
    const NodeId shape_view = producer;
    const ValueId source = ir_match::tensor_arg(graph, graph.node(shape_view), 0);
    const bool x_inside = !index.used_outside(x, members);
    if (source >= 0 && likely_contiguous(graph.value(source).tensor) &&
        (x_inside || !index.used_outside(source, {shape_view}))) {
      view = shape_view;
      computed = source;
      stored = x_inside ? source : x;
      producer = graph.value(source).producer;
    }
  }
  const std::string key = space_key(graph.value(computed).tensor);
  if (producer < 0 || !available(producer) || members.count(producer) != 0 ||
      !elementwise_of_space(graph, graph.node(producer), key))
    return {};
  // A producer fused with the elementwise ops before it would store only x;
  // taken alone it makes them store their result for it.
  for (NodeId q : index.producers[static_cast<std::size_t>(producer)]) {
    const Node& before = graph.node(q);
    if (available(q) && elementwise_of_space(graph, before, key) &&
        !index.used_outside(before.outputs[0], {producer}))
      return {};
  }
  std::set<NodeId> trial = members;
  trial.insert(producer);
  if (view >= 0) trial.insert(view);
  if (!index.convex(trial)) return {};
  if (!index.used_outside(stored, trial)) stored = -1;  // through a view, read by the norm alone
  return {producer, view, computed, stored};
}

}  // namespace

std::string take_norm_prologue(const GraphIndex& index,
                               const std::function<bool(NodeId)>& available, NormMatch* match) {
  const Graph& graph = index.graph;
  const NormGroup& norm = *match->group;
  // The tensor the kernel reads through its Load functor.
  std::string read;
  const bool softmax = is_softmax_forward(norm.spec.kind);
  if (norm.spec.kind == NormKind::LayerNormForward || norm.spec.kind == NormKind::RmsNormForward ||
      softmax)
    read = "x";
  else if (norm.spec.kind == NormKind::BatchNormBackward)
    read = "grad_out";
  else
    return {};
  const auto x = std::find_if(norm.inputs.begin(), norm.inputs.end(),
                              [&read](const auto& in) { return in.first == read; });
  if (x == norm.inputs.end()) return {};
  std::set<NodeId> members(match->nodes.begin(), match->nodes.end());
  std::vector<NodeId> nodes = elementwise_prologue(index, x->second, available, members);
  // Note [A norm prologue read elsewhere]: x's own producer, read by others
  // too, joins alone (with the view between, if any); the kernel stores the
  // producer's result for them.
  StoredProducer found;
  if (nodes.empty() && read == "x" && !softmax) {
    found = stored_producer(index, available, members, x->second);
    if (found.producer >= 0) nodes = {found.producer};
  }
  const ValueId computed = found.producer >= 0 ? found.computed : x->second;
  const bool store_x = found.stored >= 0;
  if (nodes.empty()) return {};
  PointwiseSpec prologue;
  std::vector<ValueId> reads;
  if (std::string p = prologue_spec(graph, nodes, computed, norm.spec.dtype, &prologue, &reads);
      !p.empty())
    return "prologue not taken: " + p;
  const std::string rows = space_key(graph.value(computed).tensor);
  // The batch-norm sums read every [rows, channels] tensor channels
  // innermost, copying one stored otherwise (batch_norm_kernel.cpp): a read
  // in another layout than the stored x would be a copy per call.
  const TensorType* layout = nullptr;
  if (read == "grad_out") {
    for (const auto& [name, value] : norm.inputs) {
      if (name == "x") layout = &graph.value(value).tensor;
    }
  }
  const int rank = static_cast<int>(graph.value(x->second).tensor.rank());
  for (std::size_t k = 0; k < reads.size(); ++k) {
    const Value& value = graph.value(reads[k]);
    if (value.kind != ValueKind::Tensor)
      return "prologue not taken: " + value.name + " is not a tensor";
    TensorArg& in = prologue.inputs[k];
    const bool dense = space_key(value.tensor) == rows && likely_contiguous(value.tensor);
    // Note [Softmax prologues with broadcast inputs]: read in place by its
    // strides, broadcast over x's shape.
    if (softmax && !dense && rank >= 1 && value.tensor.rank() <= static_cast<std::int64_t>(rank)) {
      in = TensorArg{in.dtype, IndexMode::Strided, rank};
      continue;
    }
    if (space_key(value.tensor) != rows)
      return "prologue not taken: " + value.name + " is not read as " + read +
             "'s rows (broadcast)";
    if (layout != nullptr && !ir_match::same_strides(value.tensor, *layout))
      return "prologue not taken: " + value.name + " is not laid out as x";
    in = TensorArg{in.dtype, IndexMode::Contiguous, 0};
  }

  NormGroup with = norm;
  with.spec.prologue = prologue;
  with.general.prologue = prologue;
  with.spec.store_x = with.general.store_x = store_x;
  if (store_x) with.outputs.push_back({"xout", found.stored});
  with.inputs.erase(with.inputs.begin() + (x - norm.inputs.begin()));
  for (std::size_t k = 0; k < reads.size(); ++k)
    with.inputs.push_back({"in" + std::to_string(k), reads[k]});
  if (found.view >= 0) nodes.push_back(found.view);
  std::sort(nodes.begin(), nodes.end());
  const std::string taken = adopt_norm_part(std::move(with), nodes, "prologue", match);
  return match->group->spec.store_x ? taken + ", its result also stored" : taken;
}

}  // namespace mybackend
