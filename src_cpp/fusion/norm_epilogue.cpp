#include "fusion/norm_epilogue.h"

#include <algorithm>
#include <set>
#include <vector>

#include "fusion/pointwise_lowering.h"
#include "fusion/prologue.h"

namespace mybackend {
std::string take_norm_epilogue(const GraphIndex& index,
                               const std::function<bool(NodeId)>& available, NormMatch* match) {
  const Graph& graph = index.graph;
  const NormGroup& norm = *match->group;
  if (norm.spec.kind != NormKind::LayerNormBackward && norm.spec.kind != NormKind::RmsNormBackward)
    return {};
  const auto grad_in = std::find_if(norm.outputs.begin(), norm.outputs.end(),
                                    [](const auto& out) { return out.first == "grad_in"; });
  if (grad_in == norm.outputs.end() || grad_in->second < 0 ||
      graph.value(grad_in->second).kind != ValueKind::Tensor)
    return {};
  const ValueId dx = grad_in->second;
  std::set<NodeId> members(match->nodes.begin(), match->nodes.end());
  const std::vector<NodeId> nodes = elementwise_epilogue(index, dx, available, members);
  if (nodes.empty()) return {};

  PointwiseSsa ssa(graph);
  ssa.logical(dx);
  for (NodeId id : nodes) {
    if (std::string p = ssa.add_node(graph.node(id)); !p.empty())
      return "epilogue not taken: " + graph.node(id).name + ": " + p;
  }
  PointwiseSpec& epilogue = ssa.spec();
  const TensorType& rows = graph.value(dx).tensor;
  epilogue.rank = static_cast<int>(rows.rank());
  std::vector<ValueId> stored;
  std::vector<ValueId> candidates{dx};
  for (NodeId id : nodes) candidates.push_back(graph.node(id).outputs[0]);
  for (ValueId v : candidates) {
    if (!index.used_outside(v, members)) continue;
    const TensorType& t = graph.value(v).tensor;
    if (!t.is_contiguous())
      return "epilogue not taken: " + graph.value(v).name + " is not stored contiguous";
    epilogue.outputs.push_back(
        PwOutput{TensorArg{t.dtype, IndexMode::Contiguous, 0}, ssa.logical(v)});
    stored.push_back(v);
  }
  const std::vector<ValueId>& reads = ssa.inputs();
  if (stored.empty() || reads.empty() || reads[0] != dx)
    return "epilogue not taken: it stores nothing anyone reads";
  epilogue.inputs.resize(reads.size());
  for (std::size_t k = 0; k < reads.size(); ++k) {
    const TensorType& t = graph.value(reads[k]).tensor;
    if (k > 0 && (graph.value(reads[k]).kind != ValueKind::Tensor ||
                  space_key(t) != space_key(rows) || !t.is_contiguous()))
      return "epilogue not taken: " + graph.value(reads[k]).name +
             " is not read as grad_in's rows (broadcast or strided)";
    epilogue.inputs[k] = TensorArg{t.dtype, IndexMode::Contiguous, 0};
  }

  NormGroup with = norm;
  with.spec.epilogue = epilogue;
  with.general.epilogue = epilogue;
  with.outputs.erase(with.outputs.begin() + (grad_in - norm.outputs.begin()));
  for (std::size_t k = 1; k < reads.size(); ++k)
    with.inputs.push_back({"ein" + std::to_string(k), reads[k]});
  for (std::size_t k = 0; k < stored.size(); ++k)
    with.outputs.push_back({"eout" + std::to_string(k), stored[k]});
  return adopt_norm_part(std::move(with), nodes, "epilogue", match);
}

}  // namespace mybackend
