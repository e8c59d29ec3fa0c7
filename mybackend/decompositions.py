"""The decomposition tables aot_autograd applies before lowering.

A graph with a CUDA tensor gets PyTorch's core-ATen table with a few ops kept
whole because an engine runs them better as one unit than as the primitives
they decompose into; a graph whose tensors are all on the CPU gets a table
that keeps ATen's ops whole (Note [Eager's kernels on the CPU]).
docs/decompositions.md says why for each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions

from mybackend.ops.batch_norm import batch_norm_backward, batch_norm_training
from mybackend.ops.group_norm import group_norm
from mybackend.ops.roll import roll_as_concatenation

aten = torch.ops.aten

# Kept whole: fused attention kernels and the layer-norm and softmax backward
# kernels are faster than the matmul/softmax/reduction chains the
# decompositions produce (the softmax backwards are one generated row-wise
# kernel on CUDA: src_cpp/fusion/norm_lowering.h). Batch-norm backward
# replaces core ATen's decomposition with mybackend's own (ADDED): core's is
# ~15 nodes per batch norm (ResNet-50's backward graph doubles, 1037 -> 1938
# nodes), which costs aot_autograd about a third of its trace and partition
# time (docs/performance-history.md, "Compile time"); mybackend's keeps the op whole
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
    """``_native_batch_norm_legit_no_training`` as elementwise ops.

    Added to the core table: so written, inference batch norm fuses with the
    ReLU and residual add after it into one generated kernel; whole, it is
    three ATen kernels per layer. Math in fp32 as eager's kernels do,
    ``(x - mean) * invstd * weight + bias``; the two statistics outputs are
    empty, as eager's are outside training. (Torch's own decomposition goes
    through the mutating ``_native_batch_norm_legit``, which aot_autograd's
    functional graphs cannot hold.)

    Note [Per-channel work inside the activation's kernel]
    Every parameter is viewed to [1, C, 1, ...] before it is cast or used,
    so the only per-channel ops are ``rsqrt(var + eps)`` and the casts, at
    the broadcast shape: the pointwise planner computes them inside the
    activation's kernel (Note [Broadcast producers inlined] in
    src_cpp/fusion/pointwise_planner.h). Written as a per-channel scale and
    shift on [C] first, they were two launches per layer of their own
    (ResNet-18 at batch 1 under CUDA graphs: 40 launches, 52 of 309 us;
    MobileNet-v3: 92 launches, 101 of 481 us), since a [C] value viewed
    to [1, C, 1, 1] does not broadcast to [N, C, H, W] as it stands. With
    ``hoist_parameter_work`` the per-channel ops still read parameters
    only, and are computed once (Note [Hoisted parameter work]).
    """
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    compute = torch.promote_types(x.dtype, torch.float32)

    def per_channel(t: torch.Tensor) -> torch.Tensor:
        return t.view(shape).to(compute)

    out = (x.to(compute) - per_channel(running_mean)) * torch.rsqrt(per_channel(running_var) + eps)
    if weight is not None:
        out = out * per_channel(weight)
    if bias is not None:
        out = out + per_channel(bias)
    empty = x.new_zeros((0,), dtype=compute)
    return out.to(x.dtype), empty, empty.clone()


# The training batch-norm ones, group norm and roll return NotImplemented where
# they do not apply (Note [Training batch norm] in batch_norm.py, Note
# [Group-norm statistics] in group_norm.py): aot_autograd then keeps the op
# whole.
ADDED: dict[Any, Callable[..., Any]] = {
    aten._native_batch_norm_legit_no_training.default: batch_norm_inference,
    aten._native_batch_norm_legit_functional.default: batch_norm_training,
    aten.native_batch_norm_backward.default: batch_norm_backward,
    aten.native_group_norm.default: group_norm,
    # Note [Rolls as concatenations] in mybackend/ops/roll.py (declines for
    # symbolic sizes: the op then stays whole).
    aten.roll.default: roll_as_concatenation,
}


# Note [Eager's kernels on the CPU]
# On the CPU the core generates no code: every node of a graph runs as the
# ATen kernel eager would run. A decomposition there buys no fusion, only
# other arithmetic: core ATen's native_batch_norm_backward differs from
# ATen's kernel by up to 2.3e-5 (its grad_weight sum runs in another order),
# native_group_norm_backward by 2.5e-5, gelu_backward, silu_backward,
# mish_backward, tanh_backward, addcmul and nll_loss_forward by an ulp or
# two; after three SGD steps that left an MLP, a transformer block and a
# GroupNorm/SiLU CNN 1.5e-8 to 3e-8 from eager, where whole they are
# bit-identical. So a graph whose tensors are all on the CPU is traced with
# no torch decomposition: aot_autograd needs none (it functionalizes
# mutating ops itself, and CompositeImplicitAutograd ops decompose in the
# dispatcher whatever the table says), and the lowering takes any ATen
# overload. Only the training batch-norm and the group-norm entries stay,
# which decline unless their device is in batch_norm.REWRITTEN_DEVICES
# (CUDA): on the CPU the ops stay whole as well, and tests that widen
# REWRITTEN_DEVICES still run the rewrite's path there. Inference batch
# norm stays whole too (decomposed it rounds differently from ATen's CPU
# kernel, and fusing it buys nothing there). A graph with any CUDA tensor,
# or with none at all, gets the full table.
CPU_TABLE: dict[Any, Callable[..., Any]] = {
    aten._native_batch_norm_legit_functional.default: batch_norm_training,
    aten.native_batch_norm_backward.default: batch_norm_backward,
    aten.native_group_norm.default: group_norm,
}


@cache
def _full_table() -> dict[Any, Callable[..., Any]]:
    table = {op: fn for op, fn in core_aten_decompositions().items() if str(op) not in KEPT_WHOLE}
    table.update(ADDED)
    return table


def decomposition_table(
    example_inputs: Sequence[Any] | None = None, gm: torch.fx.GraphModule | None = None
) -> dict[Any, Callable[..., Any]]:
    """The table for a graph: CPU_TABLE when its tensors (example inputs,
    parameters and buffers, the values dynamo recorded on its nodes) are all
    on the CPU (Note [Eager's kernels on the CPU]); otherwise, and without
    arguments, core-ATen's decompositions minus the ops in KEPT_WHOLE, plus
    ADDED."""
    if example_inputs is not None and graph_devices(example_inputs, gm) == {"cpu"}:
        return CPU_TABLE
    return _full_table()


def graph_devices(
    example_inputs: Sequence[Any], gm: torch.fx.GraphModule | None = None
) -> set[str]:
    """The device types of the tensors a graph reads or makes: its example
    inputs (FakeTensors carry their device), and with ``gm`` its parameters,
    buffers and the values on its nodes (a tensor moved or made on a device
    inside the graph)."""
    tensors = [v for v in pytree.tree_leaves(list(example_inputs)) if isinstance(v, torch.Tensor)]
    if gm is not None:
        tensors += gm.parameters()
        tensors += gm.buffers()
        for node in gm.graph.nodes:
            value = node.meta.get("example_value", node.meta.get("val"))
            if value is not None:
                tensors += (v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor))
    return {t.device.type for t in tensors}
