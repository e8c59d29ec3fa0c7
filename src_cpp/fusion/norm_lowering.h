// Row-wise normalizations -> NormSpec: softmax and log_softmax (forward and
// backward), native_layer_norm and its backward, RMS norm as core ATen
// leaves it (pow/mean/add/rsqrt/mul, Note [RMS-norm chain]), and
// mybackend's cross-entropy ops.
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

// Ops that anchor a norm group (for the planner's refusal texts).
bool is_norm_anchor(const std::string& op);
// mybackend's fused cross-entropy ops (mybackend/cross_entropy.py).
bool is_cross_entropy_op(const std::string& op);

}  // namespace mybackend
