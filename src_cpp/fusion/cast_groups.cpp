#include "fusion/cast_groups.h"

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.h"
#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"
#include "spec/launch_tuning.h"

namespace mybackend {

bool same_dtype_copy(const Graph& graph, const Node& node) {
  if (node.op != "aten::clone.default" && node.op != "aten::_to_copy.default") return false;
  if (node.args.empty() || node.args[0].kind != Argument::Kind::Value || node.outputs.size() != 1)
    return false;
  return graph.value(node.args[0].value).tensor.dtype == graph.value(node.outputs[0]).tensor.dtype;
}

bool groupable_cast(const Graph& graph, const std::vector<NodeId>& nodes,
                    const PointwiseGroup& single) {
  int casts = 0;
  for (NodeId n : nodes) {
    const Node& node = graph.node(n);
    if (ir_match::is_dtype_cast(graph, node)) {
      ++casts;
    } else if (!same_dtype_copy(graph, node)) {
      return false;
    }
  }
  if (casts > 1) return false;
  if (single.inputs.size() != 1 || single.outputs.size() != 1 || !single.order.empty())
    return false;
  const TensorType& in = graph.value(single.inputs[0]).tensor;
  const TensorType& out = graph.value(single.outputs[0]).tensor;
  for (DType d : {in.dtype, out.dtype}) {
    if (!is_floating(d) || !codegen_supports_dtype(d)) return false;
  }
  return in.device == out.device && ir_match::same_shape(in, out) && likely_contiguous(in) &&
         likely_contiguous(out);
}

bool groupable_layout_copy(const TransposeGroup& copy) {
  const auto& code = copy.spec.body.instrs;
  const auto casts = std::count_if(code.begin(), code.end(),
                                   [](const PwInstr& instr) { return instr.op == PwOp::Cast; });
  if (casts > 1) return false;
  for (DType d : {copy.spec.in_dtype(), copy.spec.out_dtype()}) {
    if (!is_floating(d) || !codegen_supports_dtype(d)) return false;
  }
  return true;
}

ValueId CastMember::input() const { return single ? single->inputs[0] : layout_copy->input; }

ValueId CastMember::output() const { return single ? single->outputs[0] : layout_copy->output; }

std::int64_t output_bytes(const Graph& graph, const CastMember& member) {
  const TensorType& t = graph.value(member.output()).tensor;
  std::int64_t numel = 1;
  for (const Dim& d : t.sizes) {
    if (!d.is_static()) return 0;
    numel *= d.static_value();
  }
  return numel * dtype_size_bytes(t.dtype);
}

std::vector<std::vector<int>> independent_cast_sets(const std::vector<std::set<int>>& successors,
                                                    const std::vector<int>& candidates,
                                                    const std::vector<std::string>& keys) {
  MB_ASSERT(candidates.size() == keys.size(), "one key per candidate cast");
  const std::size_t count = successors.size();
  std::vector<bool> candidate(count, false);
  for (int u : candidates) candidate[static_cast<std::size_t>(u)] = true;
  // Levels by Kahn's walk: a unit's level is final once all its producers
  // were visited.
  std::vector<int> indegree(count, 0);
  for (const auto& next : successors)
    for (int s : next) ++indegree[static_cast<std::size_t>(s)];
  std::vector<int> ready;
  for (std::size_t u = 0; u < count; ++u)
    if (indegree[u] == 0) ready.push_back(static_cast<int>(u));
  std::vector<int> level(count, 0);
  std::size_t visited = 0;
  while (!ready.empty()) {
    const auto u = static_cast<std::size_t>(ready.back());
    ready.pop_back();
    ++visited;
    const int next = level[u] + (candidate[u] ? 1 : 0);
    for (int s : successors[u]) {
      const auto su = static_cast<std::size_t>(s);
      level[su] = std::max(level[su], next);
      if (--indegree[su] == 0) ready.push_back(s);
    }
  }
  MB_ASSERT(visited == count, "the unit graph of a partition has a cycle");
  std::map<std::pair<int, std::string>, std::vector<int>> sets;
  for (std::size_t k = 0; k < candidates.size(); ++k)
    sets[{level[static_cast<std::size_t>(candidates[k])], keys[k]}].push_back(candidates[k]);
  std::vector<std::vector<int>> out;
  out.reserve(sets.size());
  for (auto& [key, members] : sets) out.push_back(std::move(members));
  return out;
}

std::shared_ptr<const CastGroup> build_cast_group(const Graph& graph,
                                                  const std::vector<CastMember>& members) {
  auto group = std::make_shared<CastGroup>();
  // The defaults; the compile's tuning comes later (Note [Tuning in the specs]).
  group->spec.threads = LaunchTuning{}.pw_block;
  for (const CastMember& member : members) {
    const ValueId in = member.input(), out = member.output();
    const CastPair pair{graph.value(in).tensor.dtype, graph.value(out).tensor.dtype};
    auto& pairs = group->spec.pairs;
    auto it = std::find_if(pairs.begin(), pairs.end(), [&](const CastPair& p) {
      return p.from == pair.from && p.to == pair.to;
    });
    if (it == pairs.end()) it = pairs.insert(pairs.end(), pair);
    group->pairs.push_back(static_cast<int>(it - pairs.begin()));
    group->inputs.push_back(in);
    group->outputs.push_back(out);
    group->singles.push_back(member.single);
    group->layout_copies.push_back(member.layout_copy);
    group->spec.layout_copies = group->spec.layout_copies || member.layout_copy != nullptr;
  }
  const std::string problem = validate(group->spec);
  MB_ASSERT(problem.empty(), "cast group with an invalid spec: ", problem);
  return group;
}

}  // namespace mybackend
