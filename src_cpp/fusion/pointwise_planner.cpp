#include "fusion/pointwise_planner.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "capability/registry.h"
#include "common/error.h"
#include "fusion/cast_groups.h"
#include "fusion/ir_match.h"
#include "fusion/pointwise_lowering.h"
#include "fusion/sorted_ids.h"
#include "fusion/transposed_copies.h"
#include "spec/launch_tuning.h"

namespace mybackend {
namespace {

std::string device_problem(const TensorType& t, const Device& device, const std::string& what) {
  if (t.device.type != DeviceType::CUDA) return what + " is not on a CUDA device";
  if (t.device != device) return what + " is on another device than the output";
  if (t.rank() > kMaxKernelRank) return what + " has rank above " + std::to_string(kMaxKernelRank);
  if (!codegen_supports_dtype(t.dtype))
    return what + " has dtype " + std::string(dtype_name(t.dtype)) + ", which codegen lacks";
  return {};
}

// What the planner places: a claimed group, a pointwise group, a cast group
// or a node left to ATen.
struct Unit {
  std::vector<NodeId> nodes;  // ascending
  std::shared_ptr<const PointwiseGroup> pointwise;
  std::string why;
  int claimed = -1;  // index into claimed.groups
  std::shared_ptr<const CastGroup> casts;
  std::shared_ptr<const TransposeGroup> transpose;  // Note [Tiled transposing copies]
  // A lone copy left to ATen, as the one-copy group it would be in a cast
  // group (Note [Grouped layout copies]); used only there.
  std::shared_ptr<const PointwiseGroup> lone_copy;
};

// successors[u]: the units that read something unit u computes.
std::vector<std::set<int>> unit_successors(const std::vector<Unit>& units,
                                           const std::vector<std::vector<NodeId>>& producers) {
  std::map<NodeId, int> unit_of;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (NodeId n : units[u].nodes) unit_of[n] = static_cast<int>(u);
  std::vector<std::set<int>> successors(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (NodeId n : units[u].nodes) {
      for (NodeId p : producers[static_cast<std::size_t>(n)]) {
        auto from = unit_of.find(p);
        if (from == unit_of.end() || from->second == static_cast<int>(u)) continue;
        successors[static_cast<std::size_t>(from->second)].insert(static_cast<int>(u));
      }
    }
  }
  return successors;
}

// What the cast group of units `set` holds, for reports.
std::string cast_group_why(const CastGroup& casts, const std::vector<Unit>& units,
                           const std::vector<int>& set) {
  std::size_t converting = 0, layout = 0, beside = 0;
  for (std::size_t k = 0; k < casts.outputs.size(); ++k) {
    const CastPair& pair = casts.spec.pairs[static_cast<std::size_t>(casts.pairs[k])];
    converting += pair.from != pair.to ? 1 : 0;
    const bool moves = casts.layout_copies[k] != nullptr;
    layout += moves ? 1 : 0;
    beside += !moves && units[static_cast<std::size_t>(set[k])].nodes.size() > 1 ? 1 : 0;
  }
  const std::size_t copies = casts.outputs.size() - converting;
  std::string why = "grouped " + std::to_string(casts.outputs.size()) + " independent " +
                    (copies == 0       ? "dtype casts"
                     : converting == 0 ? "copies"
                                       : "casts and copies") +
                    " into one generated multi-tensor kernel (Note [Grouped casts])";
  if (layout > 0)
    why += "; " + std::to_string(layout) + " change layout (Note [Grouped layout copies])";
  if (beside > 0)
    why += "; layout copies beside " + std::to_string(beside) +
           " casts keep the element order (Note [Copies beside a cast])";
  return why;
}

// Note [Grouped casts], Note [Grouped layout copies]: the one-cast or copy
// units that do not depend on each other become one cast-group unit per
// level and device, split where a group's outputs would pass kCastGroupBytes.
void merge_cast_units(const Graph& graph, const std::vector<std::vector<NodeId>>& producers,
                      std::vector<Unit>& units) {
  std::vector<int> candidates;
  std::vector<std::string> keys;
  std::vector<CastMember> member_of(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Unit& unit = units[u];
    CastMember& member = member_of[u];
    if (unit.pointwise && groupable_cast(graph, unit.nodes, *unit.pointwise)) {
      member.single = unit.pointwise;
    } else if (unit.lone_copy) {
      member.single = unit.lone_copy;
    } else if (unit.transpose && groupable_layout_copy(*unit.transpose)) {
      member.layout_copy = unit.transpose;
    } else {
      continue;
    }
    candidates.push_back(static_cast<int>(u));
    keys.push_back(graph.value(member.output()).tensor.device.str());
  }
  if (candidates.size() < 2) return;
  std::vector<bool> merged(units.size(), false);
  std::vector<Unit> groups;
  auto add_group = [&](const std::vector<int>& set) {
    if (set.size() < 2) return;
    Unit group;
    std::vector<CastMember> members;
    for (int u : set) {
      const std::vector<NodeId>& nodes = units[static_cast<std::size_t>(u)].nodes;
      group.nodes.insert(group.nodes.end(), nodes.begin(), nodes.end());
      members.push_back(member_of[static_cast<std::size_t>(u)]);
      merged[static_cast<std::size_t>(u)] = true;
    }
    std::sort(group.nodes.begin(), group.nodes.end());
    group.casts = build_cast_group(graph, members);
    group.why = cast_group_why(*group.casts, units, set);
    groups.push_back(std::move(group));
  };
  for (std::vector<int>& set :
       independent_cast_sets(unit_successors(units, producers), candidates, keys)) {
    std::sort(set.begin(), set.end(), [&](int a, int b) {
      return units[static_cast<std::size_t>(a)].nodes[0] <
             units[static_cast<std::size_t>(b)].nodes[0];
    });
    std::vector<int> part;
    std::int64_t bytes = 0;
    for (int u : set) {
      const std::int64_t more = output_bytes(graph, member_of[static_cast<std::size_t>(u)]);
      if (!part.empty() && bytes + more > kCastGroupBytes) {
        add_group(part);
        part.clear();
        bytes = 0;
      }
      part.push_back(u);
      bytes += more;
    }
    add_group(part);
  }
  std::vector<Unit> kept;
  for (std::size_t u = 0; u < units.size(); ++u)
    if (!merged[u]) kept.push_back(std::move(units[u]));
  for (Unit& group : groups) kept.push_back(std::move(group));
  units.swap(kept);
}

}  // namespace

bool reorders_memory(const Graph& graph, const std::vector<NodeId>& nodes) {
  if (nodes.size() != 1) return false;
  const Node& node = graph.node(nodes[0]);
  const TensorType& out = graph.value(node.outputs[0]).tensor;
  const int rank = static_cast<int>(out.rank());
  if (rank < 2 || !static_layout(out)) return false;
  std::vector<int> order = memory_order(out);
  if (order.empty()) {
    if (!out.is_contiguous()) return false;
    for (int d = 0; d < rank; ++d) order.push_back(d);
  }
  const std::size_t inner = static_cast<std::size_t>(order.back());
  for (ValueId v : node.input_values()) {
    const TensorType& in = graph.value(v).tensor;
    if (shape_key(in) != shape_key(out) || !static_layout(in) || dense_in_order(in, order))
      continue;
    // The walk's innermost dim is contiguous in the input: vector loads.
    if (in.strides[inner].static_value() == 1 && out.sizes[inner].static_value() > 1) return true;
  }
  return false;
}

namespace {
std::int64_t static_numel(const TensorType& t) {  // t has a static layout
  std::int64_t numel = 1;
  for (const Dim& d : t.sizes) numel *= d.static_value();
  return numel;
}
}  // namespace

bool broadcasts_an_input(const Graph& graph, const std::vector<NodeId>& nodes) {
  if (nodes.size() != 1) return false;
  const Node& node = graph.node(nodes[0]);
  if (node.outputs.size() != 1) return false;
  const TensorType& out = graph.value(node.outputs[0]).tensor;
  if (!static_layout(out) || (!out.is_contiguous() && memory_order(out).empty())) return false;
  const std::int64_t numel = static_numel(out);
  if (numel <= 1) return false;
  for (ValueId v : node.input_values()) {
    const Value& in = graph.value(v);
    if (in.kind == ValueKind::Tensor && static_layout(in.tensor) && static_numel(in.tensor) < numel)
      return true;
  }
  return false;
}

bool static_layout(const TensorType& t) {
  for (const Dim& d : t.sizes)
    if (!d.is_static()) return false;
  for (const Dim& d : t.strides)
    if (!d.is_static()) return false;
  return t.strides.size() == t.sizes.size();
}

bool likely_contiguous(const TensorType& type) {
  if (type.is_contiguous()) return true;
  // Symbolic sizes: only a guess (the runtime checks the actual tensors).
  bool symbolic = false;
  for (const Dim& d : type.sizes) symbolic = symbolic || !d.is_static();
  for (const Dim& d : type.strides) symbolic = symbolic || !d.is_static();
  if (!symbolic) return false;
  return type.strides.empty() ||
         (type.strides.back().is_static() && type.strides.back().static_value() == 1);
}

std::vector<int> memory_order(const TensorType& type) {
  const int rank = static_cast<int>(type.rank());
  if (rank < 2 || type.is_contiguous()) return {};
  for (const Dim& d : type.sizes)
    if (!d.is_static()) return {};
  for (const Dim& d : type.strides)
    if (!d.is_static()) return {};
  std::vector<int> order(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) order[static_cast<std::size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return type.strides[static_cast<std::size_t>(a)].static_value() >
           type.strides[static_cast<std::size_t>(b)].static_value();
  });
  if (!dense_in_order(type, order)) return {};
  for (int d = 0; d < rank; ++d)
    if (order[static_cast<std::size_t>(d)] != d) return order;
  return {};
}

bool dense_in_order(const TensorType& type, const std::vector<int>& order) {
  if (static_cast<std::int64_t>(order.size()) != type.rank()) return false;
  std::int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Dim& size = type.sizes[static_cast<std::size_t>(*it)];
    const Dim& stride = type.strides[static_cast<std::size_t>(*it)];
    if (!size.is_static() || !stride.is_static()) return false;
    if (size.static_value() == 1) continue;
    if (stride.static_value() != expected) return false;
    expected *= size.static_value();
  }
  return true;
}

PeriodicLayout static_periodic_layout(const TensorType& input, const TensorType& walk,
                                      const std::vector<int>& order) {
  if (!static_layout(input) || !static_layout(walk) || input.rank() > walk.rank()) return {};
  const std::size_t rank = walk.sizes.size();
  const std::size_t lead = rank - input.sizes.size();
  std::vector<std::int64_t> shape(rank), strides(rank, 0);
  for (std::size_t d = 0; d < rank; ++d) {
    shape[d] = walk.sizes[d].static_value();
    if (d < lead) continue;
    const std::int64_t size = input.sizes[d - lead].static_value();
    if (size != 1 && size != shape[d]) return {};
    strides[d] = size == 1 ? 0 : input.strides[d - lead].static_value();
  }
  if (!order.empty()) {
    std::vector<std::int64_t> walked_shape, walked_strides;
    for (int d : order) {
      walked_shape.push_back(shape[static_cast<std::size_t>(d)]);
      walked_strides.push_back(strides[static_cast<std::size_t>(d)]);
    }
    shape.swap(walked_shape);
    strides.swap(walked_strides);
  }
  return periodic_layout(shape, strides);
}

IndexMode periodic_mode(const PeriodicLayout& layout, const TensorType& walk) {
  // static: the layout has a period
  return layout.block == static_numel(walk) ? IndexMode::Periodic : IndexMode::PeriodicRows;
}

std::string shape_key(const TensorType& type) {
  std::string key;
  for (const Dim& d : type.sizes) key += d.str() + ",";
  return key;
}

namespace {

// What a pointwise or concatenation node must meet alone: one tensor output
// and tensor inputs on one CUDA device, and a spec of its own that
// validates (a concatenation's pieces Strided, as build_group makes them).
std::string lone_node_problem(const Graph& graph, const Node& node, const std::string& input_word,
                              bool inputs_broadcast) {
  if (node.outputs.size() != 1) return "not exactly one output";
  const Value& out = graph.value(node.outputs[0]);
  if (out.kind != ValueKind::Tensor) return "the output is not a tensor";
  if (std::string p = device_problem(out.tensor, out.tensor.device, "the output"); !p.empty())
    return p;
  for (ValueId v : node.input_values()) {
    const Value& in = graph.value(v);
    if (in.kind != ValueKind::Tensor) return "reads the symbolic scalar " + in.name;
    if (std::string p = device_problem(in.tensor, out.tensor.device, input_word + " " + in.name);
        !p.empty())
      return p;
    if (inputs_broadcast && in.tensor.rank() > out.tensor.rank())
      return "an input has a higher rank than the output";
  }
  PointwiseSsa trial(graph);
  if (std::string p = trial.add_node(node); !p.empty()) return p;
  PointwiseSpec& spec = trial.spec();
  spec.outputs.push_back(
      PwOutput{TensorArg{out.tensor.dtype, IndexMode::Contiguous, 0}, trial.logical(out.id)});
  spec.rank = static_cast<int>(out.tensor.rank());
  for (const PwGuard& g : spec.guards)
    spec.inputs[static_cast<std::size_t>(g.input)] = TensorArg{
        spec.inputs[static_cast<std::size_t>(g.input)].dtype, IndexMode::Strided, spec.rank};
  if (std::string p = validate(spec); !p.empty()) return "invalid spec: " + p;
  return {};
}

}  // namespace

std::string pointwise_candidate_problem(const Graph& graph, const Node& node) {
  if (node.kind != NodeKind::Aten) return "not an ATen node";
  const OpEntry* entry = CapabilityRegistry::builtin().find(node.op);
  if (entry == nullptr || entry->op_class != OpClass::Pointwise) return "not a pointwise op";
  if (!has_pointwise_lowering(node.op)) return "no generated lowering for " + node.op;
  return lone_node_problem(graph, node, "input", /*inputs_broadcast=*/true);
}

bool is_concatenation(const Node& node) {
  return node.kind == NodeKind::Aten && node.op == "aten::cat.default";
}

std::string concatenation_candidate_problem(const Graph& graph, const Node& node) {
  if (!is_concatenation(node)) return "not a concatenation";
  return lone_node_problem(graph, node, "piece", /*inputs_broadcast=*/false);
}

bool PointwisePlanner::inlines_into_cat(const std::vector<NodeId>& group, NodeId cat) const {
  if (group.empty() || group.size() > kMaxPieceNodes) return false;
  std::set<NodeId> members(group.begin(), group.end());
  members.insert(cat);
  const Device& device = graph_.value(graph_.node(cat).outputs[0]).tensor.device;
  for (NodeId id : group) {
    const ValueId v = graph_.node(id).outputs[0];
    if (index_.used_outside(v, members) || graph_.value(v).tensor.device != device) return false;
  }
  return true;
}

PointwisePlanner::PointwisePlanner(const GraphIndex& index, const FusionOptions& options)
    : index_(index), graph_(index.graph), options_(options) {}

bool PointwisePlanner::inlines_into(const std::vector<NodeId>& group, NodeId reader) const {
  const TensorType& big = graph_.value(graph_.node(reader).outputs[0]).tensor;
  if (group.empty() || group.size() > kMaxInlinedNodes) return false;
  const TensorType& small = graph_.value(graph_.node(group[0]).outputs[0]).tensor;
  if (small.device.str() != big.device.str() || small.rank() > big.rank()) return false;
  std::int64_t small_numel = 1, big_numel = 1;
  for (const Dim& d : big.sizes) {
    if (!d.is_static()) return false;
    big_numel *= d.static_value();
  }
  const std::size_t offset = static_cast<std::size_t>(big.rank() - small.rank());
  for (std::size_t d = 0; d < small.sizes.size(); ++d) {
    if (!small.sizes[d].is_static()) return false;
    const std::int64_t size = small.sizes[d].static_value();
    if (size != 1 && size != big.sizes[offset + d].static_value()) return false;
    small_numel *= size;
  }
  if (small_numel >= big_numel) return false;
  std::set<NodeId> members(group.begin(), group.end());
  members.insert(reader);
  for (NodeId id : group) {
    if (index_.used_outside(graph_.node(id).outputs[0], members)) return false;
  }
  return true;
}

std::set<NodeId> PointwisePlanner::nodes_only_pieces_read(const std::vector<NodeId>& nodes) const {
  std::set<NodeId> out;
  if (std::none_of(nodes.begin(), nodes.end(),
                   [&](NodeId id) { return is_concatenation(graph_.node(id)); }))
    return out;
  const std::set<NodeId> members(nodes.begin(), nodes.end());
  // Readers come after what they read: walk back so that readers are known.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const ValueId v = graph_.node(*it).outputs[0];
    if (index_.used_outside(v, members)) continue;
    const std::vector<NodeId>& readers = index_.readers[static_cast<std::size_t>(v)];
    const bool only_pieces =
        !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
          return members.count(r) && (out.count(r) || is_concatenation(graph_.node(r)));
        });
    if (only_pieces) out.insert(*it);
  }
  return out;
}

std::shared_ptr<const PointwiseGroup> PointwisePlanner::build_group(
    const std::vector<NodeId>& nodes, std::string* why) const {
  const std::set<NodeId> members(nodes.begin(), nodes.end());
  // The iteration space: the first stored output's shape, which every
  // stored output has (an inlined broadcast producer is never stored: Note
  // [Broadcast producers inlined]).
  const TensorType* stored = nullptr;
  for (NodeId id : nodes) {
    const ValueId v = graph_.node(id).outputs[0];
    if (index_.used_outside(v, members)) {
      stored = &graph_.value(v).tensor;
      break;
    }
  }
  const TensorType& shape =
      stored != nullptr ? *stored : graph_.value(graph_.node(nodes[0]).outputs[0]).tensor;
  const int rank = static_cast<int>(shape.rank());
  PointwiseSsa ssa(graph_);
  ssa.set_walk(shape);
  const std::set<NodeId> piece_nodes = nodes_only_pieces_read(nodes);
  ssa.set_piece_nodes(piece_nodes);
  for (NodeId id : nodes) {
    if (piece_nodes.count(id)) continue;  // lowered where a concatenation reads it
    if (std::string p = ssa.add_node(graph_.node(id)); !p.empty()) {
      *why = graph_.node(id).name + ": " + p;
      return nullptr;
    }
  }
  auto group = std::make_shared<PointwiseGroup>();
  for (int from_end : ssa.coord_dims_from_end()) group->coord_dims.push_back(rank + from_end);
  const std::string key = shape_key(shape);
  // Note [Iteration order]: the first stored output decides.
  for (NodeId id : nodes) {
    const ValueId v = graph_.node(id).outputs[0];
    if (!index_.used_outside(v, members)) continue;
    group->order = memory_order(graph_.value(v).tensor);
    break;
  }
  auto dense = [&](const TensorType& t) {
    return group->order.empty() ? likely_contiguous(t) : dense_in_order(t, group->order);
  };
  // Outputs: values something outside the group reads.
  for (NodeId id : nodes) {
    const ValueId v = graph_.node(id).outputs[0];
    if (!index_.used_outside(v, members)) continue;
    const TensorType& t = graph_.value(v).tensor;
    TensorArg arg{t.dtype, dense(t) ? IndexMode::Aligned : IndexMode::Strided, dense(t) ? 0 : rank};
    ssa.spec().outputs.push_back(PwOutput{arg, ssa.logical(v)});
    group->outputs.push_back(v);
  }
  if (group->outputs.empty()) {
    *why = "the group computes nothing anyone reads";
    return nullptr;
  }
  PointwiseSpec& spec = ssa.spec();
  spec.rank = rank;
  group->inputs = ssa.inputs();
  if (group->inputs.empty()) {  // only literals (Note [Fills as literals])
    *why = "the group reads no tensor (ATen fills it)";
    return nullptr;
  }
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const TensorType& t = graph_.value(group->inputs[k]).tensor;
    const bool full = shape_key(t) == key && dense(t) && !ssa.guarded(k);
    spec.inputs[k].mode = full ? IndexMode::Aligned : IndexMode::Strided;
    spec.inputs[k].rank = full ? 0 : rank;
  }
  // Note [Periodic operands]
  const int vector_width = pointwise_vector_width(spec);
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (spec.inputs[k].mode != IndexMode::Strided || ssa.guarded(k)) continue;
    const PeriodicLayout periodic =
        static_periodic_layout(graph_.value(group->inputs[k]).tensor, shape, group->order);
    if (periodic.period > 1 && periodic.period % vector_width == 0)
      spec.inputs[k] = TensorArg{spec.inputs[k].dtype, periodic_mode(periodic, shape), 0};
  }
  spec.index64 = false;
  // The defaults; the compile's tuning comes later (Note [Tuning in the specs]).
  spec.threads = LaunchTuning{}.pw_block;
  PointwiseSpec general = spec;
  general.index64 = true;
  for (auto& t : general.inputs) t = TensorArg{t.dtype, IndexMode::Strided, rank};
  for (auto& o : general.outputs) o.tensor = TensorArg{o.tensor.dtype, IndexMode::Strided, rank};
  if (std::string p = validate_variants(spec, general); !p.empty()) {
    *why = p;
    return nullptr;
  }
  group->spec = std::move(spec);
  group->general = std::move(general);
  return group;
}

void PointwisePlanner::move_widening_casts_to_readers(
    std::vector<std::vector<NodeId>>& groups, std::map<NodeId, int>& group_of,
    const std::vector<std::string>& group_key, const std::map<int, int>& claimed_of_group) const {
  auto pointwise_group = [&](int g) {
    return g >= 0 && !groups[static_cast<std::size_t>(g)].empty() && claimed_of_group.count(g) == 0;
  };
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const int from = static_cast<int>(gi);
    if (!pointwise_group(from)) continue;
    const std::vector<NodeId> members = groups[gi];
    for (NodeId n : members) {
      const Node& node = graph_.node(n);
      if (!ir_match::is_dtype_cast(graph_, node)) continue;
      const ValueId in = node.args[0].value;
      const ValueId cast = node.outputs[0];
      if (dtype_size_bytes(graph_.value(cast).tensor.dtype) <
          dtype_size_bytes(graph_.value(in).tensor.dtype))
        continue;  // narrowing: the narrow value is the cheaper one to store
      if (index_.graph_output[static_cast<std::size_t>(cast)]) continue;
      const std::vector<NodeId>& readers = index_.readers[static_cast<std::size_t>(cast)];
      if (readers.empty()) continue;
      int to = -1;
      for (NodeId r : readers) {
        auto g = group_of.find(r);
        const int rg = g == group_of.end() ? -1 : g->second;
        to = r == readers.front() ? rg : (rg == to ? to : -1);
      }
      if (to == from || !pointwise_group(to) ||
          group_key[static_cast<std::size_t>(to)] != group_key[gi])
        continue;
      auto& source = groups[gi];
      source.erase(std::find(source.begin(), source.end(), n));
      auto& target = groups[static_cast<std::size_t>(to)];
      target.insert(std::upper_bound(target.begin(), target.end(), n), n);
      group_of[n] = to;
    }
  }
}

// A topological order of the partition's nodes in which each claimed
// group's members are consecutive (the group is one unit), smallest node id
// first among the ready units.
static std::vector<std::vector<NodeId>> unit_order(
    const std::vector<NodeId>& partition_nodes, const ClaimedGroups& claimed,
    const std::vector<std::vector<NodeId>>& producers) {
  std::map<NodeId, int> unit_of;
  std::vector<std::vector<NodeId>> units;
  for (const KernelGroup& g : claimed.groups()) {
    for (NodeId n : g.nodes) unit_of[n] = static_cast<int>(units.size());
    units.push_back(g.nodes);
  }
  for (NodeId n : partition_nodes) {
    if (unit_of.emplace(n, static_cast<int>(units.size())).second) units.push_back({n});
  }
  std::vector<std::set<int>> successors(units.size());
  std::vector<int> indegree(units.size(), 0);
  for (NodeId n : partition_nodes) {
    const int to = unit_of[n];
    for (NodeId p : producers[static_cast<std::size_t>(n)]) {
      auto from = unit_of.find(p);
      if (from == unit_of.end() || from->second == to) continue;
      if (successors[static_cast<std::size_t>(from->second)].insert(to).second) ++indegree[to];
    }
  }
  using Entry = std::pair<NodeId, int>;  // (first node, unit)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (indegree[u] == 0) ready.push({units[u].front(), static_cast<int>(u)});
  }
  std::vector<std::vector<NodeId>> order;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    order.push_back(units[static_cast<std::size_t>(u)]);
    for (int s : successors[static_cast<std::size_t>(u)]) {
      if (--indegree[static_cast<std::size_t>(s)] == 0)
        ready.push({units[static_cast<std::size_t>(s)].front(), s});
    }
  }
  MB_ASSERT(order.size() == units.size(), "claimed groups of a partition form a cycle");
  return order;
}

PointwisePlanner::SiblingCandidates PointwisePlanner::sibling_candidates(
    const std::vector<std::vector<NodeId>>& groups, const std::vector<int>& live,
    const std::vector<std::string>& group_key) const {
  const CapabilityRegistry& registry = CapabilityRegistry::builtin();
  // The value `v` is a chain of views of (a graph input or a node's result).
  auto base_of = [&](ValueId v) {
    for (;;) {
      const NodeId producer = graph_.value(v).producer;
      if (producer == kGraphInput) return v;
      const Node& node = graph_.node(producer);
      const OpEntry* entry = registry.find(node.op);
      const std::vector<ValueId> read = node.input_values();
      if (entry == nullptr || entry->op_class != OpClass::View || read.empty()) return v;
      v = read.front();
    }
  };
  SiblingCandidates out;
  for (int g : live) {
    const auto& nodes = groups[static_cast<std::size_t>(g)];
    if (std::all_of(nodes.begin(), nodes.end(),
                    [&](NodeId n) { return ir_match::is_dtype_cast(graph_, graph_.node(n)); }))
      continue;  // Note [Grouped casts] groups these
    std::string unused;
    if (plan_transposed_copy(index_, nodes, &unused)) continue;
    const TensorType& stored = graph_.value(graph_.node(nodes.back()).outputs[0]).tensor;
    if (!static_layout(stored)) continue;
    const std::set<NodeId> members(nodes.begin(), nodes.end());
    for (NodeId n : nodes) {
      for (ValueId read : graph_.node(n).input_values()) {
        const NodeId producer = graph_.value(read).producer;
        if (producer == kGraphInput || !members.count(producer)) out.bases[g].insert(base_of(read));
      }
    }
    std::string strides;
    for (const Dim& d : stored.strides) strides += std::to_string(d.static_value()) + ",";
    out.layout[g] = group_key[static_cast<std::size_t>(g)] + "|" + strides;
    out.groups.push_back(g);
  }
  return out;
}

std::vector<KernelGroup> PointwisePlanner::plan(const std::vector<NodeId>& partition_nodes,
                                                const ClaimedGroups& claimed) {
  // Decide: grow groups in topological order (Note [Pointwise groups]).
  const std::set<NodeId> in_partition(partition_nodes.begin(), partition_nodes.end());
  std::map<int, int> claimed_of_group;  // group -> index into claimed.groups
  std::map<NodeId, int> group_of;
  std::map<NodeId, std::vector<int>> deps;   // groups each node waits for, sorted
  std::vector<std::vector<int>> group_deps;  // groups each group waits for, sorted
  std::vector<std::vector<NodeId>> groups;
  std::vector<std::string> group_key;
  std::map<NodeId, std::string> refusals;
  // Merged groups alias the group they merged into.
  std::vector<int> alias;
  auto find = [&](int g) {
    while (alias[static_cast<std::size_t>(g)] != g) g = alias[static_cast<std::size_t>(g)];
    return g;
  };
  // Does anything reachable from `start` (groups, transitively through what
  // each group waits for) belong to `target`? Groups run as one unit, so a
  // group waits for everything any member waits for; group_deps grow as
  // groups do, hence the walk over current sets.
  // Groups seen by the current walk carry its stamp: no set is built per
  // walk (a 16-layer decoder's partition made these walks most of planning).
  std::vector<int> seen_in_walk;
  int walk = 0;
  auto reaches_from = [&](std::vector<int> stack, int target) {
    ++walk;
    seen_in_walk.resize(group_deps.size(), 0);
    while (!stack.empty()) {
      const int h = find(stack.back());
      stack.pop_back();
      if (h == target) return true;
      int& stamp = seen_in_walk[static_cast<std::size_t>(h)];
      if (stamp == walk) continue;
      stamp = walk;
      for (int next : group_deps[static_cast<std::size_t>(h)]) stack.push_back(next);
    }
    return false;
  };
  // What a node with these producers waits for (groups, transitively).
  auto waits_of = [&](const std::vector<NodeId>& producers, const std::set<NodeId>& skip,
                      std::vector<NodeId>* local_producers) {
    std::vector<int> d;
    for (NodeId p : producers) {
      if (in_partition.count(p) == 0 || skip.count(p)) continue;
      if (local_producers) local_producers->push_back(p);
      merge_into(d, deps[p]);
      if (auto g = group_of.find(p); g != group_of.end()) {
        const int pg = find(g->second);
        merge_into(d, {pg});
        merge_into(d, group_deps[static_cast<std::size_t>(pg)]);
      }
    }
    return d;
  };
  std::map<NodeId, int> claimed_index;
  for (std::size_t k = 0; k < claimed.groups().size(); ++k) {
    for (NodeId n : claimed.groups()[k].nodes) claimed_index[n] = static_cast<int>(k);
  }
  for (const std::vector<NodeId>& unit : unit_order(partition_nodes, claimed, index_.producers)) {
    const NodeId n = unit.front();
    if (auto c = claimed_index.find(n); c != claimed_index.end()) {
      // A claimed group: one fixed group that nothing joins.
      const std::set<NodeId> members(unit.begin(), unit.end());
      std::vector<int> d;
      for (NodeId m : unit)
        merge_into(d, waits_of(index_.producers[static_cast<std::size_t>(m)], members, nullptr));
      const int target = static_cast<int>(groups.size());
      groups.push_back(unit);
      std::vector<int> cleaned;
      for (int g : d) cleaned.push_back(find(g));
      std::sort(cleaned.begin(), cleaned.end());
      cleaned.erase(std::unique(cleaned.begin(), cleaned.end()), cleaned.end());
      group_deps.push_back(cleaned);
      group_key.push_back("claimed#" + std::to_string(c->second));
      alias.push_back(target);
      claimed_of_group[target] = c->second;
      for (NodeId m : unit) {
        group_of[m] = target;
        deps[m] = d;
      }
      continue;
    }
    std::vector<NodeId> local_producers;
    deps[n] = waits_of(index_.producers[static_cast<std::size_t>(n)], {}, &local_producers);
    if (!options_.generated_kernels) continue;  // the ATen runs' why says so once
    std::vector<int>& d = deps[n];
    const bool concatenation = is_concatenation(graph_.node(n));
    const std::string problem = !concatenation ? pointwise_candidate_problem(graph_, graph_.node(n))
                                : options_.concatenations
                                    ? concatenation_candidate_problem(graph_, graph_.node(n))
                                    : "concatenations are left to ATen (MYBACKEND_FUSED_CATS=0)";
    if (!problem.empty()) {
      refusals[n] = problem;
      continue;
    }
    const TensorType& out = graph_.value(graph_.node(n).outputs[0]).tensor;
    const std::string key = shape_key(out) + "@" + out.device.str();
    // Candidate groups: those of producers, same shape and device.
    std::set<int> candidates;
    for (NodeId p : local_producers) {
      auto g = group_of.find(p);
      if (g != group_of.end() && group_key[static_cast<std::size_t>(find(g->second))] == key)
        candidates.insert(find(g->second));
    }
    // Note [Broadcast producers inlined]
    for (NodeId p : local_producers) {
      auto g = group_of.find(p);
      if (g == group_of.end()) continue;
      const int pg = find(g->second);
      if (candidates.count(pg) || claimed_of_group.count(pg)) continue;
      if (inlines_into(groups[static_cast<std::size_t>(pg)], n)) candidates.insert(pg);
    }
    // Note [Concatenations in pointwise kernels]: what only the pieces need
    // is computed where the concatenation reads it.
    for (NodeId p : local_producers) {
      auto g = group_of.find(p);
      if (!concatenation || g == group_of.end()) continue;
      const int pg = find(g->second);
      if (candidates.count(pg) || claimed_of_group.count(pg)) continue;
      if (inlines_into_cat(groups[static_cast<std::size_t>(pg)], n)) candidates.insert(pg);
    }
    // Join (and merge) the candidates in id order while that stays acyclic:
    // no producer outside the chosen set may wait for it, and no chosen
    // group may wait for another (a path between them would leave and
    // re-enter the merged group).
    std::vector<int> chosen;
    for (int candidate : candidates) {
      std::vector<int> trial = chosen;
      trial.push_back(candidate);
      bool acyclic = true;
      for (int a : trial) {
        for (NodeId q : local_producers) {
          auto gq = group_of.find(q);
          const bool member = gq != group_of.end() && std::find(trial.begin(), trial.end(),
                                                                find(gq->second)) != trial.end();
          if (member) continue;
          std::vector<int> start = deps[q];
          if (gq != group_of.end()) start.push_back(gq->second);
          if (reaches_from(start, a)) acyclic = false;
        }
        for (int b : trial) {
          if (a != b && reaches_from(group_deps[static_cast<std::size_t>(b)], a)) acyclic = false;
        }
      }
      if (acyclic) chosen = trial;
    }
    int target = -1;
    if (chosen.empty()) {
      target = static_cast<int>(groups.size());
      groups.emplace_back();
      group_deps.emplace_back();
      group_key.push_back(key);
      alias.push_back(target);
    } else {
      target = chosen[0];
      group_key[static_cast<std::size_t>(target)] = key;  // an inlined producer's is smaller
      for (std::size_t k = 1; k < chosen.size(); ++k) {
        const auto from = static_cast<std::size_t>(chosen[k]);
        auto& into = groups[static_cast<std::size_t>(target)];
        into.insert(into.end(), groups[from].begin(), groups[from].end());
        groups[from].clear();
        merge_into(group_deps[static_cast<std::size_t>(target)], group_deps[from]);
        alias[from] = target;
      }
    }
    groups[static_cast<std::size_t>(target)].push_back(n);
    std::sort(groups[static_cast<std::size_t>(target)].begin(),
              groups[static_cast<std::size_t>(target)].end());
    group_of[n] = target;
    std::vector<int> waits;
    for (int g : d) {
      if (find(g) != target) waits.push_back(find(g));
    }
    std::sort(waits.begin(), waits.end());
    auto& own = group_deps[static_cast<std::size_t>(target)];
    std::vector<int> cleaned;
    for (int g : own) {
      if (find(g) != target) cleaned.push_back(find(g));
    }
    std::sort(cleaned.begin(), cleaned.end());
    cleaned.erase(std::unique(cleaned.begin(), cleaned.end()), cleaned.end());
    own = cleaned;
    merge_into(own, waits);
  }
  // Note [Sibling groups in one launch]
  if (options_.generated_kernels) {
    std::vector<int> live;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const int g = static_cast<int>(gi);
      if (!groups[gi].empty() && find(g) == g && !claimed_of_group.count(g)) live.push_back(g);
    }
    SiblingCandidates siblings = sibling_candidates(groups, live, group_key);
    std::vector<int>& candidates = siblings.groups;
    std::map<int, std::set<ValueId>>& bases = siblings.bases;
    std::map<int, std::string>& layout = siblings.layout;
    for (std::size_t a = 0; a < candidates.size(); ++a) {
      const int into = candidates[a];
      if (find(into) != into) continue;
      for (std::size_t b = a + 1; b < candidates.size(); ++b) {
        const int from = candidates[b];
        if (find(from) != from || layout[from] != layout[into]) continue;
        auto& target = groups[static_cast<std::size_t>(into)];
        const auto& source = groups[static_cast<std::size_t>(from)];
        if (target.size() + source.size() > kMaxSiblingNodes) continue;
        const auto& shared = bases[into];
        if (std::none_of(bases[from].begin(), bases[from].end(),
                         [&](ValueId read) { return shared.count(read) > 0; }))
          continue;
        if (reaches_from(group_deps[static_cast<std::size_t>(from)], into) ||
            reaches_from(group_deps[static_cast<std::size_t>(into)], from))
          continue;
        target.insert(target.end(), source.begin(), source.end());
        std::sort(target.begin(), target.end());
        groups[static_cast<std::size_t>(from)].clear();
        merge_into(group_deps[static_cast<std::size_t>(into)],
                   group_deps[static_cast<std::size_t>(from)]);
        alias[static_cast<std::size_t>(from)] = into;
        bases[into].insert(bases[from].begin(), bases[from].end());
      }
    }
  }
  for (auto& [node, g] : group_of) g = find(g);
  move_widening_casts_to_readers(groups, group_of, group_key, claimed_of_group);

  // Parametrise: a spec per group big enough to be worth a kernel.
  std::vector<Unit> units;
  std::map<NodeId, int> unit_of;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& nodes = groups[gi];
    if (nodes.empty()) continue;  // merged into another
    if (auto c = claimed_of_group.find(static_cast<int>(gi)); c != claimed_of_group.end()) {
      for (NodeId n : nodes) unit_of[n] = static_cast<int>(units.size());
      units.push_back({nodes, nullptr, {}, c->second, nullptr, nullptr, nullptr});
      continue;
    }
    std::string why;
    // Note [Tiled transposing copies]
    if (auto copy = plan_transposed_copy(index_, nodes, &why)) {
      for (NodeId n : nodes) unit_of[n] = static_cast<int>(units.size());
      units.push_back({nodes, nullptr, std::move(why), -1, nullptr, std::move(copy), nullptr});
      continue;
    }
    std::shared_ptr<const PointwiseGroup> built;
    // Note [Lone casts]
    // A lone elementwise op gains nothing from a generated kernel, except a
    // dtype cast: ATen converts bf16/fp16 to fp32 with its dynamic-cast loop,
    // one scalar per thread, where a generated cast moves 16-byte vectors. Mixed
    // precision training has one such cast per parameter gradient (and one per
    // parameter forward), so a group made only of dtype casts
    // (ir_match::is_dtype_cast) is generated whatever min_fused_nodes says.
    // (A weight gradient's cast usually joins its product instead: Note
    // [Products written in f32] in matmul_planner.h.)
    const bool only_casts = std::all_of(nodes.begin(), nodes.end(), [&](NodeId n) {
      return ir_match::is_dtype_cast(graph_, graph_.node(n));
    });
    const bool lone_concatenation = nodes.size() == 1 && is_concatenation(graph_.node(nodes[0]));
    if (!lone_concatenation &&
        (static_cast<int>(nodes.size()) >= options_.min_pointwise_nodes || only_casts ||
         reorders_memory(graph_, nodes) || broadcasts_an_input(graph_, nodes))) {
      built = build_group(nodes, &why);
    }
    if (!built) {
      for (NodeId n : nodes) {
        refusals[n] = !why.empty()         ? why
                      : lone_concatenation ? "a lone concatenation is ATen's batched copy"
                                           : "a lone elementwise op gains nothing from fusion";
      }
      // Note [Grouped layout copies]: a lone copy may still join a cast group.
      if (nodes.size() == 1 && same_dtype_copy(graph_, graph_.node(nodes[0]))) {
        std::string unused;
        auto copy = build_group(nodes, &unused);
        if (copy && groupable_cast(graph_, nodes, *copy)) {
          unit_of[nodes[0]] = static_cast<int>(units.size());
          units.push_back({nodes, nullptr, {}, -1, nullptr, nullptr, std::move(copy)});
        }
      }
      continue;
    }
    for (NodeId n : nodes) unit_of[n] = static_cast<int>(units.size());
    units.push_back({nodes, built, std::move(why), -1, nullptr, nullptr, nullptr});
  }
  for (NodeId n : partition_nodes) {
    if (unit_of.count(n)) continue;
    unit_of[n] = static_cast<int>(units.size());
    units.push_back({{n}, nullptr, {}, -1, nullptr, nullptr, nullptr});
  }
  if (options_.generated_kernels) merge_cast_units(graph_, index_.producers, units);

  // Order: Kahn over the unit graph, smallest position first (a group sits
  // at its last node), so the result is deterministic and close to FX order.
  const std::size_t count = units.size();
  const std::vector<std::set<int>> successors = unit_successors(units, index_.producers);
  std::vector<int> indegree(count, 0);
  for (const auto& next : successors)
    for (int s : next) ++indegree[static_cast<std::size_t>(s)];
  using Entry = std::pair<NodeId, int>;  // (position, unit)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  auto position = [&](int u) { return units[static_cast<std::size_t>(u)].nodes.back(); };
  for (std::size_t u = 0; u < count; ++u) {
    if (indegree[u] == 0) ready.push({position(static_cast<int>(u)), static_cast<int>(u)});
  }
  std::vector<KernelGroup> out;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    Unit& unit = units[static_cast<std::size_t>(u)];
    if (unit.claimed >= 0) {
      out.push_back(claimed.groups()[static_cast<std::size_t>(unit.claimed)]);
    } else if (unit.casts) {
      KernelGroup group;
      group.nodes = unit.nodes;
      group.set(unit.casts);
      group.spec = unit.casts->spec.to_string();
      group.why = unit.why;
      out.push_back(std::move(group));
    } else if (unit.transpose) {
      KernelGroup group;
      group.nodes = unit.nodes;
      group.set(unit.transpose);
      group.spec = unit.transpose->spec.to_string();
      group.why = unit.why;
      out.push_back(std::move(group));
    } else if (unit.pointwise) {
      KernelGroup group;
      group.nodes = unit.nodes;
      group.set(unit.pointwise);
      group.spec = unit.pointwise->spec.to_string();
      group.why = "fused " + std::to_string(unit.nodes.size()) +
                  " elementwise ops into one generated kernel (" +
                  std::to_string(unit.pointwise->inputs.size()) + " inputs, " +
                  std::to_string(unit.pointwise->outputs.size()) + " outputs)" +
                  (unit.pointwise->order.empty() ? "" : ", walked in memory order");
      out.push_back(std::move(group));
    } else {
      const NodeId n = unit.nodes[0];
      if (out.empty() || out.back().kind() != KernelKind::AtenSequence) {
        out.emplace_back();  // an AtenSequence: no payload
      }
      out.back().nodes.push_back(n);
    }
    for (int s : successors[static_cast<std::size_t>(u)]) {
      if (--indegree[static_cast<std::size_t>(s)] == 0) ready.push({position(s), s});
    }
  }
  std::size_t placed = 0;
  for (const KernelGroup& group : out) placed += group.nodes.size();
  MB_ASSERT(placed == partition_nodes.size(), "pointwise groups of a partition form a cycle");
  // Explain why the ATen runs were not generated: a claiming planner's own
  // reason (a product, reduction or norm it refused) beats "not a pointwise
  // op".
  for (const auto& [node, reason] : claimed.refusals()) refusals[node] = reason;
  for (KernelGroup& group : out) {
    if (group.kind() != KernelKind::AtenSequence) continue;
    std::string why;
    for (NodeId n : group.nodes) {
      auto r = refusals.find(n);
      if (r == refusals.end() && !options_.generated_kernels) continue;
      const std::string reason = r != refusals.end() ? r->second : "not planned";
      if (why.size() < 400) why += (why.empty() ? "" : "; ") + graph_.node(n).name + ": " + reason;
    }
    if (options_.generated_kernels) {
      group.why = "not generated: " + why;
    } else {
      group.why = "ATen calls: generated kernels are off (option generated_kernels)" +
                  (why.empty() ? "" : "; " + why);
    }
  }
  return out;
}

}  // namespace mybackend
