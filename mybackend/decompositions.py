"""The decomposition table aot_autograd applies before lowering.

It is PyTorch's core-ATen table with a few ops kept whole because an engine
runs them better as one unit than as the primitives they decompose into
(docs/decompositions.md says why for each).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

from mybackend.batch_norm import batch_norm_backward, batch_norm_training

aten = torch.ops.aten

# Kept whole: fused attention kernels and the layer-norm and softmax backward
# kernels are faster than the matmul/softmax/reduction chains the
# decompositions produce (the softmax backwards are one generated row-wise
# kernel on CUDA: src_cpp/fusion/norm_lowering.h). Batch-norm backward
# replaces core ATen's decomposition with mybackend's own (ADDED): core's is
# ~15 nodes per batch norm (ResNet-50's backward graph doubles, 1037 -> 1938
# nodes), which costs aot_autograd about a third of its trace and partition
# time (docs/performance.md, "Compile time"); mybackend's keeps the op whole
# outside CUDA channels-last training and is one reduction and a few
# elementwise nodes inside it.
KEPT_WHOLE: tuple[str, ...] = (
    "aten.native_layer_norm_backward.default",
    "aten._softmax_backward_data.default",
    "aten._log_softmax_backward_data.default",
    "aten.scaled_dot_product_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    # Note [Embedding gradients stay whole]: the decomposition is an
    # accumulating index_put, whose CUDA kernel sums the rows of one index
    # in a single warp: BERT-base's three lookups (token types: all 4096
    # rows of a batch into row 0) took 1.9 ms of a 13.5 ms training step on
    # an H100. ATen's embedding backward splits duplicates into parallel
    # segments.
    "aten.embedding_dense_backward.default",
)


def batch_norm_inference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_native_batch_norm_legit_no_training`` as per-channel elementwise ops.

    Added to the core table: so written, inference batch norm fuses with the
    ReLU and residual add after it into one generated kernel; whole, it is
    three ATen kernels per layer. Math in fp32 as eager's kernels do (as
    x·scale + shift, which rounds differently from eager's (x - mean)·invstd·w
    + b by an ulp of fp32, far below the output's precision); the two
    statistics outputs are empty, as eager's are outside training. (Torch's
    own decomposition goes through the mutating ``_native_batch_norm_legit``,
    which aot_autograd's functional graphs cannot hold.)
    """
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    compute = torch.promote_types(x.dtype, torch.float32)
    # Per-channel scale and shift first: they read parameters and buffers
    # only, so inference graphs compute them once (Note [Hoisted parameter
    # work]) and the activation sees one multiply-add.
    scale = torch.rsqrt(running_var.to(compute) + eps)
    if weight is not None:
        scale = scale * weight.to(compute)
    shift = -running_mean.to(compute) * scale
    if bias is not None:
        shift = shift + bias.to(compute)
    out = x.to(compute) * scale.view(shape) + shift.view(shape)
    empty = x.new_zeros((0,), dtype=compute)
    return out.to(x.dtype), empty, empty.clone()


# The training batch-norm ones return NotImplemented where they do not apply
# (Note [Training batch norm] in batch_norm.py): aot_autograd then keeps the
# op whole.
ADDED: dict[Any, Callable[..., Any]] = {
    aten._native_batch_norm_legit_no_training.default: batch_norm_inference,
    aten._native_batch_norm_legit_functional.default: batch_norm_training,
    aten.native_batch_norm_backward.default: batch_norm_backward,
}


@cache
def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core-ATen decompositions minus the ops in KEPT_WHOLE, plus ADDED."""
    table = {op: fn for op, fn in core_aten_decompositions().items() if str(op) not in KEPT_WHOLE}
    table.update(ADDED)
    return table
