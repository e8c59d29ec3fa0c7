// The reduction engine's planner (CUDA engine I): which nodes of a partition
// become one generated reduction or normalization kernel. It claims its
// groups after the matmul planner and before the pointwise planner grows
// elementwise groups around them (Note [Claimed groups]).
//
// Note [Norm groups]
// _softmax / _log_softmax over the last dim, their backward forms
// (_softmax_backward_data / _log_softmax_backward_data, kept whole by
// mybackend/decompositions.py), native_layer_norm and
// native_layer_norm_backward (any number of trailing normalized dims), and
// the RMS-norm chain core ATen leaves (Note [RMS-norm chain]) each become
// one `norm` group: a row-wise kernel (NormSpec) that reads a row, reduces
// it and writes it in one launch. These always replace several ATen kernels
// (or the decomposed chain), so they are claimed even alone.
//
// Note [Reduction groups]
// A reduction (sum, mean, prod, amax, amin, var/std (correction), argmax,
// argmin) whose reduced dims form one contiguous range anchors a
// `reduction` group:
// * prologue: elementwise producers (pointwise candidates) of the input's
//   shape whose results only the group reads, walked backwards (they are
//   recomputed inside the reduction's loads, never stored);
// * epilogue: elementwise consumers of the result's shape whose inputs are
//   the result, other epilogue nodes, or tensors computed before the group
//   (the group must stay convex: GraphIndex::convex). What anyone outside
//   reads is stored.
// A reduction with neither prologue nor epilogue stays an ATen call: ATen's
// kernel is one launch already.
//
// Note [Reductions walked in memory order]
// A squeeze-excitation block averages a channels-last activation over H and
// W: logically the inner dims of [N, C, H, W], in memory the middle ones of
// [N, H, W, C]. Walked logically, each row is H * W elements C apart, read
// one scalar at a time. So the kernel walks the input space in the memory
// order of the value it reduces (memory_order, as a pointwise group walks
// its output: Note [Iteration order]) when that value is dense in an order
// other than the logical one and the reduced dims are one range there: the
// squeeze-excitation mean becomes a column reduction (ReduceAxis::Outer) of
// a dense [N, H * W, C], a channels-last batch norm's sums over (N, H, W) a
// column reduction of [N * H * W, C], a sum over C a row reduction. Such
// dims need not be one range in logical order (N, H, W are not). The output
// space walks the kept dims in the same relative order (ReductionGroup's
// out_order); tensors dense in a walk's order are Aligned. At launch the
// strides are taken over the logical shapes and then permuted with the
// shapes; the kernel source does not change.
#pragma once

#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/graph_index.h"

namespace mybackend {

// Claims norm and reduction groups among the partition's nodes that
// `claimed` does not hold yet; refuses (with the reason) reductions and norm
// anchors it cannot use. `row_epilogues`: reductions may take their rows'
// readers (Note [Row epilogues in the graph]).
void claim_reduction_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                            ClaimedGroups& claimed, bool row_epilogues = true);

}  // namespace mybackend
