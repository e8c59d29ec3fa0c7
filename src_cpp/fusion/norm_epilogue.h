// Note [Norm epilogues]
// A backward layer or RMS norm's grad_in is, in a pre-norm transformer, read
// only by the residual stream's gradient sum and its cast for the next
// product's backward:
//   dx = native_layer_norm_backward(...)[0]; s = add(dx, g); c = _to_copy(s, bf16)
// Stored as written that is a pass writing dx (f32) and another reading it
// back with g: in ViT-B/16's training step at batch 64 on an H100
// (2026-11-26) 0.98 ms for the 23 sums against Inductor, which fuses them
// into its layer-norm backward kernel. The norm kernel instead hands each
// vector of dx to the elementwise ops consuming it (the epilogue, a
// PointwiseSpec whose input 0 is dx) and stores what they compute: the
// consumers of dx's shape and device that the partition holds unclaimed,
// taken while the group stays convex (reduction epilogues take theirs the
// same way, Note [Reduction groups]), their other inputs and every stored
// value dense and contiguous, as the norm's rows are. dx itself is stored
// only when something outside the group reads it.
#pragma once

#include <functional>
#include <string>

#include "fusion/graph_index.h"
#include "fusion/norm_lowering.h"

namespace mybackend {

// Takes the epilogue of the backward layer or RMS norm in `match` when one
// qualifies (`available`: may a node join), updating its nodes and group.
// Returns what happened for the group's explanation: empty when grad_in
// has no elementwise consumer to take, else the ops taken or why not.
std::string take_norm_epilogue(const GraphIndex& index,
                               const std::function<bool(NodeId)>& available, NormMatch* match);

}  // namespace mybackend
