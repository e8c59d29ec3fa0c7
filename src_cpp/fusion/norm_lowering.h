// Row-wise normalizations -> NormSpec: softmax and log_softmax (forward and
// backward), native_layer_norm and its backward, RMS norm's forward as core
// ATen leaves it (pow/mean/add/rsqrt/mul with casts, Note [RMS-norm chain]),
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
// RMS norm reaches the planner as the chain core ATen leaves, written in
// its three common orders:
//   F.rms_norm (torch's _fused_rms_norm decomposition):
//     xs = _to_copy(x, f32); r = rsqrt(add(mean(pow(xs, 2), [-1...], keepdim), eps))
//     y = _to_copy(mul(mul(xs, r), weight), x.dtype)
//   HF Llama (LlamaRMSNorm, Mistral, Qwen...):
//     xs and r as above; y = mul(weight, _to_copy(mul(xs, r), x.dtype))
//   T5 (T5LayerNorm): r as above; y = mul(weight, _to_copy(mul(x, r), weight.dtype))
// Matched from the mean: pow(xs, 2) or mul(xs, xs), mean.dim over the
// trailing dims with keepdim, add.Scalar/add.Tensor of a number, rsqrt,
// then the normalising mul; the weight multiply and the cast back are
// optional. In fp32 the casts are absent (x.to(f32) is x), and a chain
// written in 16 bits without casts is taken too, computed in fp32 as a
// generated pointwise kernel computes 16-bit ops (opmath). xs is x or an
// exact widening cast of x to the chain's dtype, when that is the dtype the
// kernel computes in for x (fp32 for bf16/fp16); the normalising mul reads
// xs, x itself (T5: the mul widens it as the cast did) or another such cast
// of x: mybackend/passes/widening_casts.py gives each of the cast's two
// readers (the square and the mul) a copy of its own, Note [One widening
// cast per reader], so in a compiled graph the chain has two casts of x. The
// casts join the group when only the chain reads them. Every intermediate
// is read only inside the chain, except rsqrt (saved for backward: stored
// as the kernel's rstd statistic). The weight has exactly the normalized
// dims' sizes; the result has x's dtype and shape.
// The backward is autograd's derivative of the chain (pow(rstd, 3),
// expand, sums over rows and columns, alias nodes: some 15 ops, another
// arrangement for each order and dtype), not matched as a norm backward: it
// runs as generated pointwise and reduction kernels.
//
// Note [RMS-norm rounding]
// The kernel computes as the chain does, in fp32 (fp64 for fp64 x): the
// square, the mean, eps, rsqrt and x * rstd are the chain's fp32 ops, the
// casts of 16-bit x to fp32 are exact, and the sums run in another order
// (as every reduction kernel's do). Where the chain rounds depends on where
// the weight multiply sits:
// - before the cast back (F.rms_norm): (x * rstd) * w in fp32 (a 16-bit
//   weight widens exactly), rounded once to x's dtype on the store. The
//   kernel's expression is the same.
// - after the cast back (HF Llama, T5): h = x * rstd is rounded to 16 bits,
//   then weight * h is a 16-bit multiply: eager computes it in fp32 and
//   rounds. The spec says so (NormSpec::round_before_weight): the kernel
//   rounds x * rstd to the output dtype, widens it back and multiplies by
//   the weight in fp32. Both factors are 16-bit values (the mul's result has
//   x's dtype only when the weight has it too), so their fp32 product is
//   exact (8 + 8 or 11 + 11 significant bits), and the store's one rounding
//   gives eager's result bit for bit.
// A weight multiply whose result has another dtype (an fp32 weight after
// the cast to bf16: an fp32 result) stays outside, and the norm ends at
// the cast; a chain whose result does not have x's dtype is not taken.
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
