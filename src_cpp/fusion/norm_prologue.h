// Note [Norm prologues]
// A forward layer or RMS norm whose input is computed by elementwise ops
// nothing else reads (the MLP's Linear -> GELU -> LayerNorm, in inference)
// recomputes those ops at each element it loads, as a reduction's prologue
// does (Note [Reduction groups]): x is never stored, one launch less. The
// norm kernel reads x through a Load functor (device/mb_norm.cuh's
// StoredRows, or the prologue's) at the same offsets, so only dense inputs
// of x's own shape qualify: a broadcast input (a bias over the rows) keeps
// the ops in their own pointwise kernel. Training graphs save x for the
// backward: there x's producer alone joins, and the kernel stores x (Note
// [A norm prologue read elsewhere]).
//
// The batch-norm backward sums read grad_out the same way (Note [Gradient
// readers] in device/mb_batch_norm.cuh): in ResNet training grad_out is the
// ReLU gradient, where(relu_out <= 0, 0, dy), which the input-gradient
// kernel also reads. The lowering gives the sums a copy of those ops of
// their own (Note [A ReLU gradient recomputed by its batch-norm sums] in
// mybackend/passes/batch_norm_gradients.py), taken here, so neither
// kernel stores or reads the masked gradient.
//
// Note [A norm prologue read elsewhere]
// A pre-norm block's residual sum is read by the next norm and by the next
// residual add. Where no matrix product's epilogue takes it (Swin adds its
// attention branch after the window merge and reverse roll, through views),
// the add was a kernel of its own: it stored the sum, and the norm read it
// back. A forward layer or RMS norm whose x has no elementwise producer to
// itself takes x's producer alone (never the ops before it, whose values
// the other readers may read too) and stores x as it computes it, to the
// output "xout" (NormSpec::store_x): one launch and one read of x less.
// The producer may sit behind one shape view of a contiguous tensor (Swin
// sums on [B, H, W, C] and normalizes [B, H * W, C]): the same elements at
// the same offsets. The view joins too, and the kernel stores whichever of
// the sum and its view is read outside (not both); read by the norm alone,
// the sum is a prologue that stores nothing. The
// loop path for long rows computes x twice and stores the same value twice.
// x must be contiguous, as the norm's outputs are. A producer that would
// fuse with elementwise ops before it (a training step's dropout, then the
// residual add) stays with them: taken alone, it would make them store the
// value it reads, one more write and read than the fused kernel storing x.
//
// Note [Softmax prologues with broadcast inputs]
// A softmax forward takes its prologue too: attention scores plus a bias
// and a mask (Swin's relative position bias [1, heads, N, N] and shift mask
// over [windows, N, N]; T5's position bias; an additive padding mask
// [batch, 1, 1, keys]) were one ATen or generated add kernel, storing the
// sum, then the softmax reading it. Those addends broadcast over the
// scores, so unlike a norm's, a softmax prologue's inputs may have any
// strides of x's rank (IndexMode::Strided, 0 where they broadcast; the
// runtime expands them to x's shape and passes the strides and the shape).
// The kernel reads x a row at a time (x.row(r, cols).vec<N>(c, v) in
// device/mb_norm.cuh): row() turns r into its coordinates over x's leading
// dims once per row, so a strided input costs a few divisions a row, not a
// row's worth; its elements are then `step` apart along the row (one
// element per load; they are small and stay in cache). Dense inputs of x's
// shape keep vector loads. The specs hold no sizes (Note [Specs hold no
// sizes]): shape and strides are kernel arguments.
#pragma once

#include <functional>
#include <string>

#include "fusion/graph_index.h"
#include "fusion/norm_lowering.h"

namespace mybackend {

// Takes the prologue of the forward layer or RMS norm, or of the batch-norm
// backward sums (their grad_out), in `match` when one qualifies
// (`available`: may a node join), updating its nodes and group.
// Returns what happened for the group's explanation: empty when there is
// no elementwise producer to take, else the ops taken or why not.
std::string take_norm_prologue(const GraphIndex& index,
                               const std::function<bool(NodeId)>& available, NormMatch* match);

}  // namespace mybackend
