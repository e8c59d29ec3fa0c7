"""Resampling kept whole: ``F.interpolate`` as one op through aot_autograd.

Note [Resampling kept whole]
aot_autograd traces ``F.interpolate`` into its decomposition whatever the
decomposition table says: torch registers the upsampling ops' Python
decompositions for the Autograd and CompositeImplicitAutograd keys, which
tracing always takes. Bilinear upsampling becomes index arithmetic (hoisted:
Note [Constants are always hoisted]), four ``_unsafe_index`` gathers, each
writing a tensor of the output's size, and the interpolation as elementwise
ops; nearest becomes one gather. ATen's gathers are general index kernels:
in the zoo's UNet at batch 1 under CUDA graphs they took 363 of 1437 us of
GPU time (H100, 2026-11-28), where eager runs one upsampling kernel per
call that reads the input and writes the output once.

So, before aot traces it, each call on a CUDA tensor that needs no gradient
becomes ``mybackend::interpolate``, an op with ``F.interpolate``'s own
arguments whose implementation is ``F.interpolate``: eager's kernels and
eager's values by construction, and one node that the core runs as an ATen
call. Scalar ``size`` and ``scale_factor`` arguments are spelled as lists,
one entry per spatial dim, as ``F.interpolate`` expands them itself. Its
kernels take any strides (a channels-last input gives a channels-last
output: the fake implementation is ``F.interpolate`` on fake tensors, so
the traced strides are the kernel's), so the layout plan may hand it
channels-last activations (src_cpp/capability/unclaimed_layouts.cpp).

Calls whose input requires a gradient keep the decomposition: the op has no
autograd formula, and the backward of the gathers (index_put accumulations)
is what aot_autograd derives. ``mode="area"`` is adaptive average pooling,
not a gather, and stays as it is; so does a call whose size or scale is not
a plain number or a list of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import Tensor

from mybackend.ops.dynamo_calls import bound_arguments, example_value

# Where the rewrite applies: on the CPU, mybackend runs ATen's kernels and the
# graph is traced without decompositions (Note [Eager's kernels on the CPU]).
# Tests widen it to run the path on the CPU.
REWRITTEN_DEVICES: Collection[str] = ("cuda",)

_GATHER_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear")
_SIGNATURE = inspect.signature(F.interpolate)


def _resample(
    x: Tensor,
    size: Sequence[int] | None,
    scale_factor: Sequence[float] | None,
    mode: str,
    align_corners: bool | None,
    recompute_scale_factor: bool | None,
    antialias: bool,
) -> Tensor:
    """``F.interpolate`` with list sizes and scales (Note [Resampling kept
    whole]): the op's implementation, and on fake tensors its fake one (the
    meta kernels behind F.interpolate give the real kernels' strides)."""
    return F.interpolate(
        x,
        list(size) if size is not None else None,
        list(scale_factor) if scale_factor is not None else None,
        mode,
        align_corners,
        recompute_scale_factor,
        antialias,
    )


interpolate = torch.library.custom_op("mybackend::interpolate", _resample, mutates_args=())
interpolate.register_fake(_resample)


def _per_dim(value: Any, dims: int, kind: type) -> list[Any] | bool | None:
    """``value`` as a list of ``dims`` entries; None for None; False when it
    is not a plain number, a size node or a list of them."""
    if value is None:
        return None
    items = list(value) if isinstance(value, list | tuple) else [value] * dims
    if len(items) != dims:
        return False
    for item in items:
        if isinstance(item, bool):
            return False
        plain = isinstance(item, int | float) if kind is float else isinstance(item, int)
        symbolic = kind is int and isinstance(item, torch.fx.Node)  # a size read from a shape
        if not (plain or symbolic):
            return False
    return [float(i) for i in items] if kind is float else items


def _rewritable_call(node: torch.fx.Node, devices: Collection[str]) -> tuple[Any, ...] | None:
    """The op's arguments when the call can become mybackend::interpolate."""
    a = bound_arguments(node, _SIGNATURE)
    if a is None:
        return None
    x = example_value(a["input"])
    if not isinstance(x, Tensor) or x.device.type not in devices or x.requires_grad:
        return None
    if a["mode"] not in _GATHER_MODES or not isinstance(a["antialias"], bool):
        return None
    dims = x.dim() - 2
    size = _per_dim(a["size"], dims, int)
    scale = _per_dim(a["scale_factor"], dims, float)
    if size is False or scale is False or (size is None) == (scale is None):
        return None
    flags = (a["align_corners"], a["recompute_scale_factor"])
    if not all(f is None or isinstance(f, bool) for f in flags):
        return None
    return (a["input"], size, scale, a["mode"], *flags, a["antialias"])


def keep_resampling_whole(
    gm: torch.fx.GraphModule, devices: Collection[str] | None = None, *, recompile: bool = True
) -> int:
    """Replaces each ``F.interpolate`` call of a dynamo graph that reads a
    CUDA tensor needing no gradient with ``mybackend::interpolate``; returns
    how many (Note [Resampling kept whole]). With ``recompile=False`` the
    caller regenerates ``gm``'s code."""
    graph = gm.graph
    allowed = REWRITTEN_DEVICES if devices is None else devices
    rewritten = 0
    for node in graph.find_nodes(op="call_function", target=F.interpolate):
        if (arguments := _rewritable_call(node, allowed)) is None:
            continue
        with graph.inserting_before(node):
            whole = graph.call_function(torch.ops.mybackend.interpolate.default, arguments)
        whole.meta = dict(node.meta)
        node.replace_all_uses_with(whole)
        graph.erase_node(node)
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten
