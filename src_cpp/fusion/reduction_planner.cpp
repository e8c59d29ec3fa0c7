#include "fusion/reduction_planner.h"

#include <functional>
#include <set>

#include "capability/registry.h"
#include "fusion/norm_epilogue.h"
#include "fusion/norm_lowering.h"
#include "fusion/norm_prologue.h"
#include "fusion/prologue.h"
#include "fusion/reduction_lowering.h"
#include "fusion/row_epilogue.h"

namespace mybackend {
namespace {

bool reads_strided(const ReductionSpec& spec) {
  for (const TensorArg& in : effective_prologue(spec).inputs)
    if (in.mode == IndexMode::Strided) return true;
  return false;
}

std::string kind_text(NormKind kind) { return std::string(norm_kind_name(kind)); }

// Note [Row epilogues in the graph]: rows of a static length short enough
// for one block.
bool rows_fit_one_block(const Graph& graph, const ReductionNode& r) {
  const std::optional<std::int64_t> length = static_row_length(graph, r);
  return length && *length <= kMaxRowEpilogueLength;
}

struct Claimer {
  const GraphIndex& index;
  std::set<NodeId> partition;
  ClaimedGroups& claimed;
  bool row_epilogues;

  bool free(NodeId n) const { return partition.count(n) && !claimed.claimed(n); }

  void try_norm(NodeId anchor) {
    NormMatch match;
    const std::string problem = match_norm(index, partition, anchor, &match);
    if (!problem.empty()) {
      if (is_norm_anchor(index.graph.node(anchor).op)) claimed.refuse(anchor, problem);
      return;
    }
    for (NodeId n : match.nodes) {
      if (!free(n)) return;
    }
    const std::string prologue = take_norm_prologue(
        index, [this](NodeId p) { return free(p); }, &match);
    const std::string epilogue = take_norm_epilogue(
        index, [this](NodeId p) { return free(p); }, &match);
    KernelGroup group;
    group.nodes = match.nodes;
    group.set(match.group);
    group.spec = match.group->spec.to_string();
    group.why =
        kind_text(match.group->spec.kind) +
        (is_channel_reduction(match.group->spec.kind)
             ? " as generated channel reductions (a chunk stage and a totals stage)"
             : " as one generated row-wise kernel") +
        (match.nodes.size() > 1 ? " (replaces " + std::to_string(match.nodes.size()) + " ATen ops)"
                                : "") +
        (prologue.empty() ? "" : ", " + prologue) + (epilogue.empty() ? "" : ", " + epilogue);
    claimed.claim(std::move(group));
  }

  void try_reduction(NodeId n) {
    const Graph& graph = index.graph;
    const Node& node = graph.node(n);
    ReductionNode r;
    if (std::string problem = parse_reduction(graph, node, &r, /*memory_range=*/true);
        !problem.empty()) {
      const OpEntry* entry = CapabilityRegistry::builtin().find(node.op);
      if (entry != nullptr && entry->op_class == OpClass::Reduction) claimed.refuse(n, problem);
      return;
    }
    std::set<NodeId> members = {n};
    const std::vector<NodeId> prologue = elementwise_prologue(
        index, r.input, [this](NodeId p) { return free(p); }, members);
    const std::vector<NodeId> epilogue = elementwise_epilogue(
        index, r.output, [this](NodeId p) { return free(p); }, members,
        /*operand_producers=*/true);  // Note [Epilogue operands recomputed]
    std::string why;
    std::shared_ptr<const ReductionGroup> built =
        build_reduction_group(index, r, prologue, epilogue, {}, &why);
    // Note [Row epilogues in the graph]
    std::vector<NodeId> rows;
    std::string rows_why;
    if (row_epilogues && built && built->spec.axis == ReduceAxis::Inner &&
        rows_fit_one_block(graph, r)) {
      std::vector<ValueId> results = {r.output};
      for (NodeId e : epilogue) results.push_back(graph.node(e).outputs[0]);
      std::set<NodeId> trial = members;
      rows = take_row_epilogue(
          index, r.input, r.dims, results, [this](NodeId p) { return free(p); }, trial);
      if (!rows.empty()) {
        std::shared_ptr<const ReductionGroup> with_rows =
            build_reduction_group(index, r, prologue, epilogue, rows, &rows_why);
        if (with_rows) {
          built = std::move(with_rows);
          members.swap(trial);
        } else {
          rows.clear();
        }
      }
    }
    const bool lone = prologue.empty() && epilogue.empty() && rows.empty();
    // Note [Lone column reductions]: a lone reduction over inner dims is
    // one ATen launch as fast as ours, but ATen's column reductions (a bias
    // gradient's sum over tokens) read at under half the copy bandwidth,
    // so a lone Outer reduction is generated (split: Note [Split outer
    // reductions] in device/mb_reduction.cuh). Only over inputs read in
    // memory order: the column walk over a transposed input (a row
    // reduction in memory) is uncoalesced, where ATen's is not.
    if (lone && (!built || built->spec.axis != ReduceAxis::Outer)) {
      claimed.refuse(n,
                     "a lone reduction (no elementwise prologue or epilogue) gains nothing over "
                     "ATen's kernel" +
                         (rows_why.empty() ? "" : " (row epilogue not taken: " + rows_why + ")"));
      return;
    }
    if (lone && reads_strided(built->spec)) {
      claimed.refuse(n,
                     "a lone column reduction over a strided input: ATen's kernel reads it in "
                     "memory order");
      return;
    }
    if (!built) {
      claimed.refuse(n, why);
      return;
    }
    KernelGroup group;
    group.nodes.assign(members.begin(), members.end());
    group.set(built);
    group.spec = built->spec.to_string();
    group.why =
        std::string(reduce_op_name(r.op)) + " (" + std::string(reduce_axis_name(built->spec.axis)) +
        ") with " + std::to_string(prologue.size()) + " prologue and " +
        std::to_string(epilogue.size()) + " epilogue elementwise ops" +
        (rows.empty() ? "" : " and a row epilogue of " + std::to_string(rows.size()) + " ops") +
        " as one generated kernel" +
        (rows_why.empty() ? "" : " (row epilogue not taken: " + rows_why + ")");
    claimed.claim(std::move(group));
  }
};

}  // namespace

void claim_reduction_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                            ClaimedGroups& claimed, bool row_epilogues) {
  Claimer claimer{index, {partition_nodes.begin(), partition_nodes.end()}, claimed, row_epilogues};
  // Norms first: an RMS-norm chain contains a mean that would otherwise
  // anchor a plain reduction group.
  for (NodeId n : partition_nodes) {
    const std::string& op = index.graph.node(n).op;
    if (claimer.free(n) && (is_norm_anchor(op) || op == "aten::mean.dim")) claimer.try_norm(n);
  }
  for (NodeId n : partition_nodes) {
    if (claimer.free(n)) claimer.try_reduction(n);
  }
}

}  // namespace mybackend
