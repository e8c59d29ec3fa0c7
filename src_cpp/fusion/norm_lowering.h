// Row-wise normalizations -> NormSpec: softmax and log_softmax (forward and
// backward), native_layer_norm and its backward, RMS norm as core ATen
// leaves it (pow/mean/add/rsqrt/mul, Note [RMS-norm chain]),
// mybackend's cross-entropy ops, and mybackend's training batch-norm
// reductions.
//
// Note [Batch-norm reductions]
// mybackend/ops/batch_norm.py (Note [Training batch norm]) rewrites a CUDA
// training batch norm over channels-last data into two per-channel
// reductions and elementwise ops that the pointwise planner fuses with the
// ReLU or residual add around them:
//   batch_norm_stats(x, running_mean, running_var, momentum, eps)
//     -> mean, invstd (fp32), new running_mean, new running_var
//   batch_norm_backward_reduce(grad_out, x, mean, invstd)
//     -> grad_bias = sum(dy), grad_weight = sum(dy * (x - mean)) * invstd (fp32)
// Each is a norm group of two launches (device/mb_batch_norm.cuh): row
// chunks of [rows, channels] into per-channel partials, then the partials
// combined in chunk order (deterministic, as eager's). x must have its
// channels innermost; a layout the IR knows is not (NCHW) is refused and
// the op runs as ATen through its Python implementation.
//
// Note [RMS-norm chain]
// F.rms_norm / nn.RMSNorm decompose to
//   xs = x or _to_copy(x, f32); mean(pow(xs, 2), [-1...], keepdim) -> add eps
//   -> rsqrt -> mul(xs, rsqrt) [-> mul(., weight)] [-> _to_copy(., x.dtype)]
// Matched from the mean: every intermediate is read only inside the chain,
// except rsqrt (saved for backward: stored as the kernel's rstd statistic)
// and xs when it is x itself. The result must have x's dtype.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/graph_index.h"

namespace mybackend {

struct NormMatch {
  std::vector<NodeId> nodes;  // ascending
  std::shared_ptr<const NormGroup> group;
};

// Is node `anchor` a norm (or the mean of an RMS-norm chain) the planner
// generates, with all its nodes in `partition`? Empty when it is (then
// *out is filled), else why not.
std::string match_norm(const GraphIndex& index, const std::set<NodeId>& partition, NodeId anchor,
                       NormMatch* out);

// Makes `with` (the match's group, its specs given a prologue or epilogue,
// `part`, of the elementwise `nodes`) the match's group once both specs
// validate. Returns the explanation: "with 2 epilogue elementwise ops", or
// "epilogue not taken: <why>" leaving the match as it was.
std::string adopt_norm_part(NormGroup with, const std::vector<NodeId>& nodes,
                            const std::string& part, NormMatch* match);

// Ops that anchor a norm group (for the planner's refusal texts).
bool is_norm_anchor(const std::string& op);
// mybackend's fused cross-entropy ops (mybackend/ops/cross_entropy.py).
bool is_cross_entropy_op(const std::string& op);
// mybackend's training batch-norm reductions (mybackend/ops/batch_norm.py).
bool is_batch_norm_op(const std::string& op);

}  // namespace mybackend
