#include "fusion/norm_prologue.h"

#include <algorithm>
#include <set>
#include <vector>

#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"
#include "fusion/prologue.h"

namespace mybackend {

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
  // too, joins alone; the kernel stores x for them.
  bool store_x = false;
  if (nodes.empty() && read == "x" && !softmax) {
    const TensorType& xt = graph.value(x->second).tensor;
    const NodeId producer = graph.value(x->second).producer;
    if (producer >= 0 && available(producer) && members.count(producer) == 0 &&
        likely_contiguous(xt) && elementwise_of_space(graph, graph.node(producer), space_key(xt))) {
      // A producer fused with the elementwise ops before it would store
      // only x; taken alone it makes them store their result for it.
      bool joins_its_inputs = false;
      for (NodeId q : index.producers[static_cast<std::size_t>(producer)]) {
        const Node& before = graph.node(q);
        joins_its_inputs = joins_its_inputs ||
                           (available(q) && elementwise_of_space(graph, before, space_key(xt)) &&
                            !index.used_outside(before.outputs[0], {producer}));
      }
      std::set<NodeId> trial = members;
      trial.insert(producer);
      if (!joins_its_inputs && index.convex(trial)) {
        nodes = {producer};
        store_x = true;
      }
    }
  }
  if (nodes.empty()) return {};
  PointwiseSpec prologue;
  std::vector<ValueId> reads;
  if (std::string p = prologue_spec(graph, nodes, x->second, norm.spec.dtype, &prologue, &reads);
      !p.empty())
    return "prologue not taken: " + p;
  const std::string rows = space_key(graph.value(x->second).tensor);
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
    if (softmax && !dense && rank >= 1 && value.tensor.rank() <= static_cast<std::size_t>(rank)) {
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
  if (store_x) with.outputs.push_back({"xout", x->second});
  with.inputs.erase(with.inputs.begin() + (x - norm.inputs.begin()));
  for (std::size_t k = 0; k < reads.size(); ++k)
    with.inputs.push_back({"in" + std::to_string(k), reads[k]});
  const std::string taken = adopt_norm_part(std::move(with), nodes, "prologue", match);
  return store_x && taken.rfind("with ", 0) == 0 ? taken + ", its result also stored" : taken;
}

}  // namespace mybackend
