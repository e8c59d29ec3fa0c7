// ATen reductions -> ReductionSpec (the "parametrise" step of the reduction
// planner): what a reduction node computes, over which dims, and the spec of
// a group made of elementwise prologue nodes, the reduction and elementwise
// epilogue nodes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/graph_index.h"
#include "spec/kernel_spec.h"

namespace mybackend {

// One reduction node, read from its ATen arguments.
struct ReductionNode {
  ReduceOp op = ReduceOp::Sum;
  ValueId input = -1;
  ValueId output = -1;
  std::vector<int> dims;  // reduced dims of the input, ascending
  // When `dims` are one logical range: [begin, end). Otherwise (allowed by
  // parse_reduction's `memory_range`) they must be one range in memory order.
  bool logical_range = true;
  int begin = 0;
  int end = 0;
  DType value_dtype = DType::Float32;  // what is reduced (sum's dtype= argument converts first)
  double correction = 1.0;             // var/std
};

// The number of elements `r` reduces into each result, when every reduced
// size is static.
std::optional<std::int64_t> static_row_length(const Graph& graph, const ReductionNode& r);

// Why `node` is no reduction the planner handles (empty when it is; then
// *out is filled). Reduced dims must form one contiguous range: the
// innermost dims (ReduceAxis::Inner) or a middle range (Outer), in logical
// order, or with `memory_range` in logical or memory order (Note
// [Reductions walked in memory order] in reduction_planner.h).
std::string parse_reduction(const Graph& graph, const Node& node, ReductionNode* out,
                            bool memory_range = false);

// Note [Periodic operands in reductions]
// A reduction's prologue may read operands smaller than the value it
// reduces: a per-channel scale beside a channels-last activation whose
// spatial mean the kernel computes, a gate per image and channel. Read as
// Strided inputs they cost, per element, the flat index split into every
// coordinate (a run-time division per dim). Where such an input's static
// layout is periodic in the walk (Note [Periodic operands] in
// pointwise_planner.h), the fast variant reads it at `i mod period (+ (i div
// block) * period)`, the divisions as multipliers; the launch checks each
// call's tensor and runs the general variant where the layout differs.
// Epilogue inputs (the result space) are read the same way. No vector width
// applies: a kernel that loads its dense inputs as vectors reads a periodic
// one element by element inside the vector loop.
//
// Note [One value a row]
// The weight gradient of an RMS norm sums g * (x * rstd) over the rows:
// a column reduction of [rows, hidden] whose rstd [B, S, 1] holds one value
// a row. Read Strided, each element split its flat index into three
// coordinates by run-time divisions (the llama_gqa weight gradient, a
// [4096, 1024] fp32 sum, ran at 20 us against Inductor's 13.5). That layout
// is periodic with period 1: rows of one value, repeated over the columns
// (block = the row's length), so it is read PeriodicRows at `i div block`
// (one multiply-shift). Pointwise kernels keep their period above 1 (their
// vectors need the period to be a multiple of the width).
//
// The spec of prologue nodes + reduction + epilogue nodes + row epilogue
// nodes (each ascending; the row epilogue's row views and elementwise ops,
// Note [Row epilogues in the graph] in row_epilogue.h), or null with *why.
// The prologue's and the row epilogue's SSA each take the input-space
// nodes of both lists that their results depend on (a node the row
// epilogue took may compute an operand of the value reduced).
std::shared_ptr<const ReductionGroup> build_reduction_group(
    const GraphIndex& index, const ReductionNode& reduction, const std::vector<NodeId>& prologue,
    const std::vector<NodeId>& epilogue, const std::vector<NodeId>& row_nodes, std::string* why);

// Normalised dims of an int[]? argument over a tensor of `rank` (None or []
// mean every dim); false when an entry is not an int or out of range.
bool dims_argument(const Argument& arg, std::int64_t rank, std::vector<int>* dims);

}  // namespace mybackend
