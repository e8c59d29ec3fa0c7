// Elementwise prologues: the producers a generated kernel recomputes at each
// element it loads instead of reading their stored result. The reduction
// planner (Note [Reduction groups]) and the pool planner (Note [Pool
// groups]) take them the same way, with the functions here.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fusion/graph_index.h"
#include "spec/kernel_spec.h"

namespace mybackend {

// Shape and device of `t`: an elementwise node joins a prologue or epilogue
// only when its output has its group side's key.
std::string space_key(const TensorType& t);
// An elementwise node (a pointwise candidate) whose output has space `key`.
bool elementwise_of_space(const Graph& graph, const Node& node, const std::string& key);

// The elementwise producers of `value` with `value`'s space whose results
// only the group reads, walked backwards from `value`'s producer (users
// before producers): what a kernel reading `value` can recompute inside its
// loads, so `value` and the producers' results are never stored.
// `available` says whether a node may join (in the partition, unclaimed);
// `members` holds the group so far (the readers of `value` among them) and
// gains every node taken. Returns the nodes taken, ascending.
std::vector<NodeId> elementwise_prologue(const GraphIndex& index, ValueId value,
                                         const std::function<bool(NodeId)>& available,
                                         std::set<NodeId>& members);

// The elementwise consumers of `value` with `value`'s space, walked
// forwards from its readers (lowest node first), each taken only while
// `members` (the group so far, which gains each node taken) stays convex:
// what a kernel producing `value` can compute as its epilogue. With
// `operand_producers`, also the producers of the epilogue's other operands
// (Note [Epilogue operands recomputed]). Returns the nodes taken,
// ascending.
std::vector<NodeId> elementwise_epilogue(const GraphIndex& index, ValueId value,
                                         const std::function<bool(NodeId)>& available,
                                         std::set<NodeId>& members, bool operand_producers = false);

// Note [Epilogue operands recomputed]
// An RMS norm's backward scales the sum over each row by rsqrt(var + eps)
// cubed: `pow(rstd, 3)` over the reduced space [B, S, 1], read only by the
// sum's epilogue. Its reader joined the reduction's kernel, the pow itself
// did not (the epilogue walk goes forwards from the sum), and alone it is a
// launch of its own (an ATen kernel of a few microseconds and its host
// work, one per norm and step: 5 in a two-layer Llama's backward, 12 in a
// two-layer T5's). A reduction epilogue therefore also takes the
// elementwise producers of its operands that have the epilogue's space and
// whose results only the group reads, walked backwards from the epilogue
// (at most kMaxOperandProducers, the group staying convex): the kernel
// computes them per output element from their own inputs.
constexpr std::size_t kMaxOperandProducers = 4;

// Note [Epilogue operands recomputed]: the producers of `taken`'s other
// operands, of space `key`, read only by `members` (at most `limit`, the
// group staying convex); appended to `taken`, added to `members`.
void take_operand_producers(const GraphIndex& index, const std::string& key,
                            const std::function<bool(NodeId)>& available, std::set<NodeId>& members,
                            std::vector<NodeId>& taken, std::size_t limit = kMaxOperandProducers);

// The SSA of prologue `nodes` (ascending) over `value`'s space: one output,
// `value` converted to `dtype` (it gives only the dtype: the kernel takes
// the value, nothing is stored), of rank value's rank. Its inputs load
// *inputs, in order; their TensorArgs give dtypes, the caller sets modes.
// Empty on success, else why the nodes cannot be one prologue.
std::string prologue_spec(const Graph& graph, const std::vector<NodeId>& nodes, ValueId value,
                          DType dtype, PointwiseSpec* spec, std::vector<ValueId>* inputs);

}  // namespace mybackend
