"""Elementwise ops moved past the shape view that follows them.

Note [Elementwise ops past their views]
Swin's shifted-window attention adds its relative position bias on
``[B * windows, heads, N, N]``, views the sum as ``[B, windows, heads, N,
N]`` to add the shift mask, and takes the softmax:

    scores -> add(bias [1, heads, N, N]) -> view [B, windows, heads, N, N]
           -> add(mask [1, windows, 1, N, N]) -> softmax

The softmax reads the mask's add as its prologue (Note [Softmax prologues
with broadcast inputs], Note [Softmaxes before their views]), but the view
stops it there: the bias add runs as a kernel of its own and stores the
sum. An elementwise op computes the same elements on the view of its
inputs, so the pass moves the op after the view:

    scores -> view [B, windows, heads, N, N] -> add(bias [1, 1, heads, N, N])
           -> add(mask) -> softmax

and both adds join the softmax kernel.

What is matched: a shape view of a static-shaped, contiguous CUDA tensor
computed by a pointwise ATen op that nothing else reads and the graph does
not return (a pointwise op or a dtype cast), the view being read by one
such op or a softmax. Each tensor
operand must follow the view: one of the op's full shape is viewed with it;
a broadcast one only where the view splits or merges dims it broadcasts
over (its other dims keep their sizes), so it takes size-1 dims and stays a
view of itself, never a copy. The rewrite repeats up the chain while the
same holds for the operands.
"""

from __future__ import annotations

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import SHAPE_VIEWS, is_elementwise, is_static_contiguous
from mybackend.passes.fake_prop import call_with_value
from mybackend.passes.hoist import returned_nodes

aten = torch.ops.aten
_SOFTMAXES = (aten._softmax.default, aten._log_softmax.default)


def _pointwise(node: torch.fx.Node) -> bool:
    return is_elementwise(node) and isinstance(node.meta.get("val"), torch.Tensor)


def _groups(before: list[int], after: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """The sizes of `before` and `after` a view maps onto each other: runs of
    equal products, trailing size-1 dims joined to the last run."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(before) and j < len(after):
        run_before, run_after = [before[i]], [after[j]]
        i, j = i + 1, j + 1
        while _product(run_before) != _product(run_after):
            if _product(run_before) < _product(run_after) and i < len(before):
                run_before.append(before[i])
                i += 1
            elif _product(run_after) < _product(run_before) and j < len(after):
                run_after.append(after[j])
                j += 1
            else:
                return None
        groups.append((run_before, run_after))
    if any(s != 1 for s in before[i:] + after[j:]) or not groups:
        return None
    groups[-1][0].extend(before[i:])
    groups[-1][1].extend(after[j:])
    return groups


def _product(sizes: list[int]) -> int:
    out = 1
    for s in sizes:
        out *= s
    return out


def _operand_shape(
    value: torch.Tensor, before: list[int], groups: list[tuple[list[int], list[int]]]
) -> list[int] | None:
    """The shape, over the view's dims, of an operand broadcast over
    `before`, when it follows the view as a view of itself; None when it
    cannot."""
    aligned = [1] * (len(before) - value.dim()) + list(value.shape)
    if len(aligned) != len(before):
        return None
    shape: list[int] = []
    start = 0
    for run_before, run_after in groups:
        sizes = aligned[start : start + len(run_before)]
        start += len(run_before)
        if all(s == 1 for s in sizes):
            shape += [1] * len(run_after)
        elif sizes == run_before and [s for s in run_before if s != 1] == [
            s for s in run_after if s != 1
        ]:
            shape += run_after  # a run the view keeps, up to size-1 dims
        else:
            return None
    return shape


def _rewrite(graph: torch.fx.Graph, view: torch.fx.Node, returned: set[torch.fx.Node]) -> bool:
    op = view.args[0]
    if not isinstance(op, torch.fx.Node) or not _pointwise(op) or op in returned:
        return False
    if len(op.users) != 1:
        return False
    before_value, after_value = op.meta["val"], view.meta.get("val")
    if not (is_static_contiguous(before_value) and is_static_contiguous(after_value)):
        return False
    if before_value.device.type != "cuda":
        return False
    before, after = list(before_value.shape), list(after_value.shape)
    groups = _groups(before, after)
    if groups is None:
        return False
    shapes: dict[torch.fx.Node, list[int]] = {}
    for arg in op.args:
        if not isinstance(arg, torch.fx.Node):
            continue
        value = arg.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            continue
        if list(value.shape) == before:
            if not value.is_contiguous():
                return False
            shapes[arg] = after
            continue
        shape = _operand_shape(value, before, groups)
        if shape is None:
            return False
        shapes[arg] = shape
    fake_mode = detect_fake_mode([before_value])
    if fake_mode is None:
        return False
    with fake_mode, graph.inserting_before(view):
        viewed = {
            arg: call_with_value(graph, aten.view.default, (arg, shape))
            for arg, shape in shapes.items()
        }
        args = tuple(viewed.get(a, a) if isinstance(a, torch.fx.Node) else a for a in op.args)
        moved = call_with_value(graph, op.target, args, dict(op.kwargs))
    if list(moved.meta["val"].shape) != after:
        graph.erase_node(moved)
        for node in viewed.values():
            graph.erase_node(node)
        return False
    moved.meta = {**op.meta, "val": moved.meta["val"]}
    view.replace_all_uses_with(moved)
    graph.erase_node(view)
    graph.erase_node(op)
    return True


def move_elementwise_past_views(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Elementwise ops past their views]);
    returns how many ops moved."""
    graph = gm.graph
    returned = returned_nodes(gm)
    moved = 0
    changed = True
    while changed:
        changed = False
        for view in [
            n for t in SHAPE_VIEWS for n in graph.find_nodes(op="call_function", target=t)
        ]:
            if view in returned or len(view.users) != 1:
                continue
            (reader,) = view.users
            if not (_pointwise(reader) or reader.target in _SOFTMAXES):
                continue
            if _rewrite(graph, view, returned):
                moved += 1
                changed = True
    if moved and recompile:
        gm.recompile()
    return moved
