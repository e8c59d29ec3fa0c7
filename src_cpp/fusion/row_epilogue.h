// The reduction planner's row epilogues (Note [Row epilogues] in
// spec/kernel_spec.h): the elementwise ops over a row reduction's input
// space that read its result broadcast back over the rows, taken into the
// reduction's kernel.
//
// Note [Row epilogues in the graph]
// Autograd's derivative of an RMS norm, a hand-written normalization (x
// divided by its norm, x minus its mean) and a renormalized attention all
// reduce each row and then compute, elementwise over the same rows,
// something that reads the row's result: `sum_2 = sum(g * x, [-1], keepdim)`
// then, through `pow(rstd, 3)` and a scale, `expand(.., x.shape) / n * 2x +
// g * rstd`. Apart, that is a reduction kernel and a pointwise kernel that
// reads the row's inputs again from memory (and whatever the two share is
// stored once in between); together, one kernel reads each row once from
// memory and the second pass over it hits the caches. Only Inner
// reductions (a row is one block's or one warp's work) with rows of a
// static length up to kMaxRowEpilogueLength take one: a row of any length
// would give up the split form that long rows into few results need.
//
// What joins, walked forwards from the readers of the group's results (the
// reduced value and its epilogue's), lowest node first, each only while the
// group stays convex:
// * row values: those results (rank of the input, the reduced dims of size
//   1, as keepdim leaves them), and view, _unsafe_view or unsqueeze of one
//   to that shape;
// * broadcasts: expand of a row value to the input's shape;
// * elementwise ops of the input's space (shape and device) whose operands
//   are tensors computed outside the group, row values, broadcasts, or
//   values of the input space the group computes (the prologue's nodes,
//   recomputed, and the row epilogue's own);
// * then the producers of the row epilogue's other operands that only the
//   group reads (Note [Epilogue operands recomputed]; at most
//   kMaxRowOperandProducers).
// What anyone outside the group reads is stored; row values only the row
// epilogue reads stay in registers. A row view or broadcast read outside
// the group keeps the rows apart (the kernel makes no views).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "fusion/graph_index.h"

namespace mybackend {

// Rows longer than this keep their reduction apart from its elementwise
// readers (Note [Row epilogues in the graph]).
constexpr std::int64_t kMaxRowEpilogueLength = 16384;
// The most operand producers a row epilogue recomputes. More than an
// epilogue over the results takes: an RMS norm's input gradient sums the
// residual gradient, the direct term g * w * rstd and the square's
// derivative 2x, five producers before the weight multiply that the row
// sum shares (which, left out, is stored and read back: 32 MB a norm of
// Llama's [4096, 1024] fp32 gradient).
constexpr std::size_t kMaxRowOperandProducers = 16;

// Does `t` have `in`'s shape with the sorted `reduced` dims of size 1?
bool keeps_rows(const TensorType& t, const TensorType& in, const std::vector<int>& reduced);

// A shape view of a row value that keeps it one value a row: view,
// _unsafe_view or unsqueeze to `in`'s keepdim shape, or expand to `in`'s
// shape (a broadcast). `row_values` are the values that hold one value a
// row so far.
bool is_row_view(const Graph& graph, const Node& node, const TensorType& in,
                 const std::vector<int>& reduced, const std::set<ValueId>& row_values);

// The row epilogue of the reduction of `input` over `reduced` whose group
// is `members` (its results: `results`, the reduction's and the epilogue's
// outputs), taken as Note [Row epilogues in the graph] says; `members`
// gains every node taken. Returns the nodes taken (row views and
// elementwise ops), ascending.
std::vector<NodeId> take_row_epilogue(const GraphIndex& index, ValueId input,
                                      const std::vector<int>& reduced,
                                      const std::vector<ValueId>& results,
                                      const std::function<bool(NodeId)>& available,
                                      std::set<NodeId>& members);

}  // namespace mybackend
