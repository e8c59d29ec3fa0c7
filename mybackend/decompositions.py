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

aten = torch.ops.aten

# Kept whole: fused attention kernels and the layer-norm and softmax backward
# kernels are faster than the matmul/softmax/reduction chains the
# decompositions produce (the softmax backwards are one generated row-wise
# kernel on CUDA: src_cpp/fusion/norm_lowering.h). Batch-norm backward runs
# as ATen's kernel, as eager's does: decomposed it is ~15 nodes per batch norm
# (ResNet-50's backward graph doubles, 1037 -> 1938 nodes), which costs
# aot_autograd about a third of its trace and partition time
# (docs/performance.md, "Compile time").
KEPT_WHOLE: tuple[str, ...] = (
    "aten.native_layer_norm_backward.default",
    "aten.native_batch_norm_backward.default",
    "aten._softmax_backward_data.default",
    "aten._log_softmax_backward_data.default",
    "aten.scaled_dot_product_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
)


@cache
def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core-ATen decompositions minus the ops in KEPT_WHOLE."""
    table = dict(core_aten_decompositions())
    return {op: fn for op, fn in table.items() if str(op) not in KEPT_WHOLE}
