"""A contiguous copy of a permuted concatenation, written by the concatenation.

Note [Permuted concatenations]
The backward of ``qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)``
(timm's ViT attention, and any model that splits one projection into heads
this way) stacks the three attention gradients and puts them back into the
projection's layout:

    cat([dq, dk, dv]) -> view [3, B, H, N, D] -> permute(1, 3, 0, 2, 4)
        -> clone(memory_format=contiguous) -> view [B * N, 3 * C] -> mm

Run as written that is two passes over the gradients: the concatenation
writes them stacked, then a strided copy (the clone) moves every element to
its permuted place. In ViT-B/16's training step at batch 64 (H100,
2026-11-26, ``benchmarks.profile``) the 12 concatenations took 1.36 ms and
the 12 copies (ATen's strided ``elementwise_kernel``) 1.10 ms per step,
where Inductor's one fused kernel per layer took 0.45 ms in all.

The clone is itself a concatenation: ``clone(permute(cat(ps, d), P))`` equals
``cat([permute(p, P) for p in ps], P.index(d))``, contiguous like the clone,
and a stack (a cat along dim 0 viewed as [n, S0, ...]) is a cat of the parts
unsqueezed at 0. This pass rewrites the pattern so that one concatenation
reads the parts through views and writes the final layout: one pass, the
same values. What is matched: a ``clone`` with ``memory_format=
torch.contiguous_format`` of an ``aten.permute``, of an ``aten.cat`` or of a
``view`` that splits a cat's dim 0 into [number of parts, part's size] (a
stack of parts of one shape), each node read only by the next, every size
a plain integer.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import SHAPE_VIEWS
from mybackend.passes.fake_prop import call_with_value as _call

aten = torch.ops.aten


def write_permuted_cats(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns how many copies became concatenations.
    With ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    rewritten = 0
    for clone in list(graph.find_nodes(op="call_function", target=aten.clone.default)):
        if clone.kwargs.get("memory_format") is not torch.contiguous_format:
            continue
        permute = clone.args[0]
        if not _read_only_by(permute, clone) or permute.target is not aten.permute.default:
            continue
        match = _concatenation(permute.args[0])
        if match is None:
            continue
        parts, dim, stacked = match
        old_cat = permute.args[0].args[0] if stacked else permute.args[0]
        fake_mode = detect_fake_mode([p.meta.get("val") for p in parts])
        if fake_mode is None:
            continue
        rank = len(permute.args[1])
        order = [d % rank for d in permute.args[1]]
        with graph.inserting_before(clone), fake_mode:
            views = []
            for part in parts:
                if stacked:
                    part = _call(graph, aten.unsqueeze.default, (part, 0))
                views.append(_call(graph, aten.permute.default, (part, order)))
            cat = _call(graph, aten.cat.default, (views, order.index(dim)))
        cat.meta = {**clone.meta, "val": cat.meta["val"]}
        clone.replace_all_uses_with(cat)
        for node in (clone, permute, *([permute.args[0]] if stacked else []), old_cat):
            graph.erase_node(node)
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten


def _read_only_by(node: Any, reader: torch.fx.Node) -> bool:
    return isinstance(node, torch.fx.Node) and list(node.users) == [reader]


def _concatenation(
    node: Any,
) -> tuple[list[torch.fx.Node], int, bool] | None:
    """(parts, cat dim, stacked) when ``node`` is a cat read only by the
    permute, or a stack view of one."""
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    stacked = node.target in SHAPE_VIEWS
    cat = node.args[0] if stacked else node
    if not isinstance(cat, torch.fx.Node) or cat.target is not aten.cat.default:
        return None
    if stacked and list(cat.users) != [node]:
        return None
    parts = list(cat.args[0])
    shapes = [_static_shape(p) for p in parts]
    if not parts or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return None
    rank = len(shapes[0])
    dim = (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) % rank
    if not stacked:
        return parts, dim, False
    view_shape = _static_shape(node)
    part_shape = shapes[0]
    if dim != 0 or any(s != part_shape for s in shapes):
        return None
    if view_shape != [len(parts), *part_shape]:
        return None
    return parts, 0, True


def _static_shape(node: Any) -> list[int] | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return None
    shape = list(value.shape)
    return shape if all(type(s) is int for s in shape) else None
