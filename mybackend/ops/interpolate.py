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

So, before aot traces it, each call on a CUDA tensor becomes
``mybackend::interpolate``, an op with ``F.interpolate``'s own arguments
whose implementation is ``F.interpolate``: eager's kernels and eager's
values by construction, and one node that the core runs as an ATen call.
Scalar ``size`` and ``scale_factor`` arguments are spelled as lists, one
entry per spatial dim, as ``F.interpolate`` expands them itself. Its kernels
take any strides (a channels-last input gives a channels-last output: the
fake implementation is ``F.interpolate`` on fake tensors, so the traced
strides are the kernel's), so the layout plan may hand it channels-last
activations (src_cpp/capability/unclaimed_layouts.cpp).

In training the op's autograd formula is ``mybackend::interpolate_backward``,
whose implementation is the ATen backward kernel of the op ``F.interpolate``
called (``upsample_bilinear2d_backward`` for bilinear on a 4-d input, ...),
with the scales that op was given: eager's gradient, where the gathers'
backward was a zero fill and four ``index_put`` accumulations. Saved for it
is nothing but the input's sizes. Under ``torch.use_deterministic_algorithms``
``F.interpolate`` itself runs linear modes on a GPU through their gathers,
whose backward is deterministic and the ATen kernel's is not, so such a
graph keeps the decomposition. ``mode="area"`` is adaptive average pooling,
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

# The ATen kernels F.interpolate calls, by (mode, spatial dims, antialias):
# their backward ops' names, and whether those take align_corners.
_BACKWARD_OPS: dict[tuple[str, int, bool], tuple[str, bool]] = {
    **{("nearest", d, False): (f"upsample_nearest{d}d_backward", False) for d in (1, 2, 3)},
    **{
        ("nearest-exact", d, False): (f"_upsample_nearest_exact{d}d_backward", False)
        for d in (1, 2, 3)
    },
    ("linear", 1, False): ("upsample_linear1d_backward", True),
    ("bilinear", 2, False): ("upsample_bilinear2d_backward", True),
    ("bilinear", 2, True): ("_upsample_bilinear2d_aa_backward", True),
    ("bicubic", 2, False): ("upsample_bicubic2d_backward", True),
    ("bicubic", 2, True): ("_upsample_bicubic2d_aa_backward", True),
    ("trilinear", 3, False): ("upsample_trilinear3d_backward", True),
}


def _resample_backward(
    grad: Tensor,
    input_size: Sequence[int],
    scales: Sequence[float] | None,
    mode: str,
    align_corners: bool | None,
    antialias: bool,
) -> Tensor:
    """The gradient of ``_resample``'s input: the backward kernel of the ATen
    op F.interpolate called, given the scales it was given (None where it
    was given an output size)."""
    dims = len(input_size) - 2
    name, takes_corners = _BACKWARD_OPS[(mode, dims, antialias)]
    factors = list(scales) if scales is not None else [None] * dims
    corners = [bool(align_corners)] if takes_corners else []
    op = getattr(torch.ops.aten, name).default
    return op(grad, list(grad.shape[2:]), list(input_size), *corners, *factors)


interpolate_backward = torch.library.custom_op(
    "mybackend::interpolate_backward", _resample_backward, mutates_args=()
)
interpolate_backward.register_fake(_resample_backward)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, _, scale_factor, mode, align_corners, recompute_scale_factor, antialias = inputs
    ctx.input_size = list(x.shape)
    # F.interpolate passes its scales on unless it recomputed them into a size.
    ctx.scales = None if recompute_scale_factor else scale_factor
    ctx.mode, ctx.align_corners, ctx.antialias = mode, align_corners, antialias


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    grad_input = torch.ops.mybackend.interpolate_backward(
        grad, ctx.input_size, ctx.scales, ctx.mode, ctx.align_corners, ctx.antialias
    )
    return grad_input, None, None, None, None, None, None


interpolate.register_autograd(_backward, setup_context=_setup_context)


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
    if not isinstance(x, Tensor) or x.device.type not in devices:
        return None
    dims = x.dim() - 2
    if (
        not isinstance(a["antialias"], bool)
        or (a["mode"], dims, a["antialias"]) not in _BACKWARD_OPS
    ):
        return None
    # F.interpolate runs gathers itself here; their backward is the deterministic one.
    if x.requires_grad and torch.are_deterministic_algorithms_enabled():
        return None
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
    CUDA tensor with ``mybackend::interpolate``; returns how many (Note
    [Resampling kept whole]). With ``recompile=False`` the caller
    regenerates ``gm``'s code."""
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
