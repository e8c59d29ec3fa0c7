"""Training batch norm as two per-channel reductions and elementwise ops.

Note [Training batch norm]
aot_autograd keeps a training batch norm whole: the forward is
``_native_batch_norm_legit_functional`` and the backward
``native_batch_norm_backward``, each ATen's kernels. On ResNet-50's training
step (channels-last, bf16, batch 64, H100) those took about 7 ms of a
19 ms step, and the ReLU after each batch norm, and its backward before
each, ran as kernels of their own: five passes over every activation
forward and eight backward, at under half the copy bandwidth for ATen's
channels-last statistics kernel.

So, for CUDA inputs whose channels are innermost in memory (channels-last
images, or [N, C]), the decomposition table rewrites them. 4-d images are
rewritten in any layout, because the table runs before the joint graph's
channels-last plan (Note [Channels-last planning]), which makes every
convolution's output, and so the batch norm after it, channels-last:

* forward: ``mybackend::batch_norm_stats(x, running_mean, running_var,
  momentum, eps)`` gives the fp32 per-channel mean and 1/sqrt(var + eps)
  (biased variance, as ATen saves them) and the updated running statistics
  (unbiased variance), reading x once; ``y = (x - mean) * invstd * weight +
  bias`` is elementwise, so it fuses with the ReLU (or residual add) after
  it into one generated kernel;
* backward: ``mybackend::batch_norm_backward_reduce(grad_out, x, mean,
  invstd)`` gives the fp32 parameter gradients per channel, grad_bias =
  sum(dy) and grad_weight = sum(dy * xhat) with xhat = (x - mean) * invstd,
  reading both once; the input gradient ``(dy - (grad_bias + xhat *
  grad_weight) / n) * invstd * weight`` is elementwise.

Every elementwise operand is x's shape or a per-channel view, so the
elementwise part is one generated kernel and no per-channel op runs as a
launch of its own (casts of the gradients aside when the weight is not
fp32).

The C++ core generates both reductions (Note [Batch-norm reductions] in
src_cpp/fusion/norm_lowering.h); the backward sums recompute the ReLU
gradient they read instead of reading it stored (Note [A ReLU gradient
recomputed by its batch-norm sums] in mybackend/passes/batch_norm_gradients.py).
Where the layout is still NCHW at lowering (a 4-d batch norm no
convolution feeds), or a kernel cannot run, the ops' ATen implementations
below run instead. On the CPU, in fp64, and
for other ranks that are not channels-innermost, the decompositions
decline and aot_autograd keeps ATen's op whole.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch
from torch import Tensor

# Where the rewrite applies: the generated reductions are CUDA kernels.
# Tests widen it to run the whole path on the CPU (through the ATen
# implementations).
REWRITTEN_DEVICES: Collection[str] = ("cuda",)

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reduced_dims(x: Tensor) -> list[int]:
    return [0, *range(2, x.dim())]


@torch.library.custom_op("mybackend::batch_norm_stats", mutates_args=())
def batch_norm_stats(
    x: Tensor, running_mean: Tensor, running_var: Tensor, momentum: float, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-channel mean and 1/sqrt(var + eps) of x [N, C, ...] in fp32, and the
    running statistics moved by ``momentum`` towards the batch's mean and
    unbiased variance."""
    var, mean = torch.var_mean(x.float(), _reduced_dims(x), correction=0)
    invstd = torch.rsqrt(var + eps)
    count = x.numel() // x.shape[1]
    unbiased = var * (count / (count - 1)) if count > 1 else torch.full_like(var, float("nan"))
    new_mean = momentum * mean + (1 - momentum) * running_mean.float()
    new_var = momentum * unbiased + (1 - momentum) * running_var.float()
    return mean, invstd, new_mean.to(running_mean.dtype), new_var.to(running_var.dtype)


@batch_norm_stats.register_fake
def _batch_norm_stats_fake(
    x: Tensor, running_mean: Tensor, running_var: Tensor, momentum: float, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    channel = x.new_empty(x.shape[1], dtype=torch.float32)
    return (
        channel,
        torch.empty_like(channel),
        torch.empty_like(running_mean),
        torch.empty_like(running_var),
    )


@torch.library.custom_op("mybackend::batch_norm_backward_reduce", mutates_args=())
def batch_norm_backward_reduce(
    grad_out: Tensor, x: Tensor, mean: Tensor, invstd: Tensor
) -> tuple[Tensor, Tensor]:
    """The parameter gradients of a batch norm in fp32: grad_bias =
    sum(grad_out) and grad_weight = sum(grad_out * (x - mean)) * invstd per
    channel."""
    shape = _channel_shape(x)
    dims = _reduced_dims(x)
    grad = grad_out.float()
    centered = x.float() - mean.view(shape)
    return grad.sum(dims), (grad * centered).sum(dims) * invstd


@batch_norm_backward_reduce.register_fake
def _batch_norm_backward_reduce_fake(
    grad_out: Tensor, x: Tensor, mean: Tensor, invstd: Tensor
) -> tuple[Tensor, Tensor]:
    channel = x.new_empty(x.shape[1], dtype=torch.float32)
    return channel, torch.empty_like(channel)


def _channel_shape(x: Tensor) -> list[int]:
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _channels_innermost(x: Tensor) -> bool:
    """x's channels (dim 1) are its innermost dim in memory, the others in order."""
    order = [0, *range(2, x.dim()), 1]
    return x.permute(order).is_contiguous()


def _rewritten(x: Tensor) -> bool:
    """4-d inputs are rewritten in any layout: the joint graph's channels-last
    plan (Note [Channels-last planning]) runs after this table and makes the
    activations of a CNN channels-last; one it leaves in NCHW runs the ops'
    ATen implementations. Other ranks only when already channels-innermost."""
    return (
        x.device.type in REWRITTEN_DEVICES
        and x.dtype in _DTYPES
        and x.dim() >= 2
        and (x.dim() == 4 or _channels_innermost(x))
    )


def batch_norm_training(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor,
    running_var: Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> Any:
    """``_native_batch_norm_legit_functional`` in training, as
    ``batch_norm_stats`` and elementwise ops (Note [Training batch norm]);
    ``NotImplemented`` (keep ATen's op) elsewhere."""
    if not (training and _rewritten(x) and isinstance(momentum, float)):
        return NotImplemented
    mean, invstd, new_mean, new_var = torch.ops.mybackend.batch_norm_stats(
        x, running_mean, running_var, momentum, float(eps)
    )
    # Every operand of the elementwise part is x's shape or a per-channel
    # view, so it is one generated kernel (with the ReLU after it), and no
    # per-channel op runs as a launch of its own.
    shape = _channel_shape(x)
    y = (x.float() - mean.view(shape)) * invstd.view(shape)
    if weight is not None:
        y = y * weight.float().view(shape)
    if bias is not None:
        y = y + bias.float().view(shape)
    return y.to(x.dtype), mean, invstd, new_mean, new_var


def batch_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    weight: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    save_mean: Tensor | None,
    save_invstd: Tensor | None,
    train: bool,
    eps: float,
    output_mask: list[bool],
) -> Any:
    """``native_batch_norm_backward`` in training, as
    ``batch_norm_backward_reduce`` and elementwise ops (Note [Training batch
    norm]); ``NotImplemented`` (keep ATen's op) elsewhere."""
    if not (
        train
        and save_mean is not None
        and save_invstd is not None
        and save_mean.dtype == torch.float32
        and save_invstd.dtype == torch.float32
        and grad_out.dtype == x.dtype
        and _rewritten(x)
        and (weight is not None or not (output_mask[1] or output_mask[2]))
    ):
        return NotImplemented
    grad_bias, grad_weight = torch.ops.mybackend.batch_norm_backward_reduce(
        grad_out, x, save_mean, save_invstd
    )
    grad_input = None
    if output_mask[0]:
        # (dy - (sum(dy) + xhat * sum(dy * xhat)) / n) * invstd * weight, with
        # sum(dy * xhat) = grad_weight: elementwise over x's shape and
        # per-channel views only (see batch_norm_training).
        shape = _channel_shape(x)
        count = x.numel() // x.shape[1]
        invstd = save_invstd.view(shape)
        xhat = (x.float() - save_mean.view(shape)) * invstd
        # Times 1/n, as ATen's kernel scales by its norm_fct: a division would
        # be an IEEE division per element in the generated kernel.
        mean_terms = (grad_bias.view(shape) + xhat * grad_weight.view(shape)) * (1.0 / count)
        grad = (grad_out.float() - mean_terms) * invstd
        if weight is not None:
            grad = grad * weight.float().view(shape)
        grad_input = grad.to(x.dtype)
    if weight is None:
        return grad_input, None, None
    return (
        grad_input,
        grad_weight.to(weight.dtype) if output_mask[1] else None,
        grad_bias.to(weight.dtype) if output_mask[2] else None,
    )
