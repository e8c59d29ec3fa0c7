// The reduction engine's planner (CUDA engine I): which nodes of a partition
// become one generated reduction or normalization kernel. It runs before the
// pointwise planner, which grows elementwise groups around the groups
// claimed here (PointwisePlanner::plan treats each as one fixed unit).
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
#pragma once

#include <map>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/graph_index.h"

namespace mybackend {

struct ClaimedGroups {
  std::vector<KernelGroup> groups;  // kind Reduction or Norm, nodes ascending
  // Why reductions and norms of the partition were not claimed (explain()).
  std::map<NodeId, std::string> refusals;
};

ClaimedGroups claim_reduction_groups(const GraphIndex& index,
                                     const std::vector<NodeId>& partition_nodes);

}  // namespace mybackend
