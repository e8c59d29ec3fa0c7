"""Sums of slices scattered into zeros: one concatenation, or one pad.

Note [Slice scatters into zeros]
The backward of a slice (``x[..., :16]``: rotary embeddings' halves and
rotated parts, a fused query-key-value projection sliced into heads) is
``slice_backward``, which core ATen writes as a scatter into zeros:
``slice_scatter(full(0), grad, dim, start, end)``. A tensor sliced into
several parts gets the sum of one such scatter a part:

    add(add(slice_scatter(full(0), dq, 3, 0, 64),
            slice_scatter(full(0), dk, 3, 64, 128)),
        slice_scatter(full(0), dv, 3, 128, 192))

ATen runs that as a fill, two kernels a scatter (a copy of its base, a copy
into the slice) and the adds: about ten passes over the full tensor for
what one concatenation writes in one. Pythia-160M's training step (GPT-NeoX
rotary embeddings over a quarter of each head) ran 13 such ATen ops a layer
(1007 kernels a step against Inductor's 717, H200, 2026-11-29).

The sum equals ``cat`` of the parts in window order when the windows are
disjoint: each element is one part's value plus zeros (a -0.0 part element
reads back as +0.0 from the sum and as -0.0 from the concatenation; equal
as values). Windows that leave gaps get zero-filled pieces (``full``) in
the concatenation, and a single scatter into zeros, read by anything, is
``constant_pad_nd`` of its part, one ATen kernel. What is matched: a tree
of ``add`` nodes (no ``alpha``; inner adds read by nothing else) over
``slice_scatter`` nodes with step 1 (each read only by its add), whose base
is a ``full`` of 0 with the sum's shape and dtype, all along one dim, every
size a plain integer, each part exactly the size of its window, the
windows disjoint; the result must keep the sum's
strides (contiguous), else the tree is left alone.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.fake_prop import call_with_value, same_dims

aten = torch.ops.aten


@dataclass(frozen=True)
class _Window:
    """A part scattered into zeros along ``dim`` at [start, end)."""

    part: torch.fx.Node
    zeros: torch.fx.Node
    dim: int
    start: int
    end: int


def _is_zero_full(node: object, like: torch.Tensor) -> bool:
    """``node`` is ``full(shape, 0)`` with ``like``'s shape, dtype and device
    (not -0.0: the sum's zeros would then differ in sign from the pad's)."""
    if not isinstance(node, torch.fx.Node) or node.target is not aten.full.default:
        return False
    value = node.meta.get("val")
    fill = node.args[1] if len(node.args) > 1 else None
    return (
        isinstance(value, torch.Tensor)
        and isinstance(fill, (int, float))
        and fill == 0
        and math.copysign(1.0, fill) > 0
        and value.dtype == like.dtype
        and value.device == like.device
        and same_dims(value.shape, like.shape)
    )


def _window(node: object, like: torch.Tensor) -> _Window | None:
    """``node`` as a scatter into zeros shaped like ``like``, else None."""
    if not isinstance(node, torch.fx.Node) or node.target is not aten.slice_scatter.default:
        return None
    args = list(node.args) + [None] * (6 - len(node.args))
    base, part, dim, start, end, step = args[:6]
    dim = node.kwargs.get("dim", 0 if dim is None else dim)
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    step = node.kwargs.get("step", 1 if step is None else step)
    value = node.meta.get("val")
    if not (isinstance(part, torch.fx.Node) and isinstance(value, torch.Tensor)):
        return None
    if not _is_zero_full(base, like) or step != 1 or not isinstance(dim, int):
        return None
    if any(not isinstance(s, int) for s in like.shape):
        return None
    dim = dim % like.dim()
    size = like.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if not (isinstance(start, int) and isinstance(end, int)):
        return None
    start = max(0, start + size if start < 0 else start)
    end = min(size, end + size if end < 0 else end)
    piece = part.meta.get("val")
    if start >= end or not isinstance(piece, torch.Tensor) or piece.dtype != like.dtype:
        return None
    # The part fills its window exactly, in plain integers.
    expected = [end - start if d == dim else s for d, s in enumerate(like.shape)]
    if piece.dim() != like.dim() or any(
        not isinstance(s, int) or s != e for s, e in zip(piece.shape, expected, strict=True)
    ):
        return None
    assert isinstance(base, torch.fx.Node)
    return _Window(part, base, dim, start, end)


def _leaves(
    root: torch.fx.Node, like: torch.Tensor
) -> tuple[list[_Window], list[torch.fx.Node]] | None:
    """The scatters summed by the add tree at ``root`` and the tree's nodes,
    readers first (the order they can be erased in); None when the tree has
    another kind of leaf (Note [Slice scatters into zeros])."""
    windows: list[_Window] = []
    nodes: list[torch.fx.Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        is_add = node.target is aten.add.Tensor and not node.kwargs and len(node.args) == 2
        if is_add and (node is root or len(node.users) == 1):
            if not all(isinstance(a, torch.fx.Node) for a in node.args):
                return None
            stack.extend(node.args)  # type: ignore[arg-type]
            continue
        window = _window(node, like)
        if window is None or (node is not root and len(node.users) != 1):
            return None
        windows.append(window)
    return windows, nodes


def _rewrite(graph: torch.fx.Graph, root: torch.fx.Node) -> list[torch.fx.Node]:
    """Rewrites the sum at ``root``; returns the nodes erased (none when
    the sum is not one the Note describes)."""
    like = root.meta.get("val")
    if not isinstance(like, torch.Tensor) or like.layout != torch.strided:
        return []
    tree = _leaves(root, like)
    if tree is None:
        return []
    windows, erased = tree
    if len({w.dim for w in windows}) != 1:
        return []
    windows.sort(key=lambda w: w.start)
    if any(a.end > b.start for a, b in itertools.pairwise(windows)):
        return []
    dim, size = windows[0].dim, like.shape[windows[0].dim]
    with detect_fake_mode([like]) or contextlib.nullcontext(), graph.inserting_before(root):
        if len(windows) == 1:
            w = windows[0]
            pad = [0, 0] * (like.dim() - 1 - dim) + [w.start, size - w.end]
            result = call_with_value(graph, aten.constant_pad_nd.default, (w.part, pad, 0.0))
        else:
            pieces: list[torch.fx.Node] = []
            at = 0
            for w in [*windows, None]:
                stop = size if w is None else w.start
                if stop > at:
                    shape = list(like.shape)
                    shape[dim] = stop - at
                    pieces.append(
                        call_with_value(
                            graph,
                            aten.full.default,
                            (shape, 0),
                            dict(windows[0].zeros.kwargs),
                        )
                    )
                if w is not None:
                    pieces.append(w.part)
                    at = w.end
            result = call_with_value(graph, aten.cat.default, (pieces, dim))
    if not same_dims(result.meta["val"].stride(), like.stride()):
        _erase_new(graph, result)
        return []
    root.replace_all_uses_with(result)
    for node in erased:
        graph.erase_node(node)
    for node in dict.fromkeys(w.zeros for w in windows):
        if not node.users:
            graph.erase_node(node)
            erased.append(node)
    return erased


def _erase_new(graph: torch.fx.Graph, result: torch.fx.Node) -> None:
    """Takes back what _rewrite inserted: ``result`` and its zero pieces."""
    first = result.args[0]
    fills = list(first) if isinstance(first, list | tuple) else []
    graph.erase_node(result)
    for node in fills:
        if node.target is aten.full.default and not node.users:
            graph.erase_node(node)


def scatters_into_zeros_as_cats(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Slice scatters into zeros]); returns
    how many sums were rewritten. With ``recompile=False`` the caller
    regenerates ``gm``'s code."""
    graph = gm.graph
    rewritten = 0
    erased: set[torch.fx.Node] = set()
    # Last node first: an outer sum is rewritten whole before its inner adds
    # are seen as roots of their own.
    for node in reversed(list(graph.nodes)):
        if node in erased or node.op != "call_function":
            continue
        if node.target not in (aten.add.Tensor, aten.slice_scatter.default):
            continue
        gone = _rewrite(graph, node)
        if gone:
            rewritten += 1
            erased.update(gone)
    if rewritten and recompile:
        gm.recompile()
    return rewritten
