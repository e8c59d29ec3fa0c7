"""A table's rows gathered, then moved into heads-first order: one gather.

Note [Gathered tables in their final layout]
Relative position biases (Swin's, BEiT's, any window attention written
after them) gather one row of a [positions, heads] table per pair of
tokens and move the heads in front:

    table[index]                         # [N * N, H]
      .view(N, N, H).permute(2, 0, 1)    # [H, N, N], strided
      .contiguous()                      # a copy

The copy moves every element a second time: a generated copy a block, or the
blocks' copies grouped into one launch (Note [Grouped layout copies]: the
plan of a two-block Swin-T does that). Gathering from the transposed table
instead, ``table.t()[:, index]``, writes [H, N * N] in that order,
contiguous: the same values and strides, and no copy. What is matched:
``clone`` (contiguous format, or none given) of a ``permute`` that moves the
last dim to the front and keeps the others in order, of a ``view`` that
keeps the last dim and splits the first, of ``index.Tensor`` of a 2-D table
by one 1-D integer index; each node read only by the next, every size a
plain integer.
"""

from __future__ import annotations

import contextlib

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import SHAPE_VIEWS
from mybackend.passes.fake_prop import call_with_value, same_dims

aten = torch.ops.aten


def _only_reader(node: torch.fx.Node, target: object) -> torch.fx.Node | None:
    """``node``'s producer (its first argument) when that calls ``target``
    and nothing else reads it."""
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node) or len(source.users) != 1:
        return None
    targets = target if isinstance(target, tuple) else (target,)
    return source if source.target in targets else None


def _static(value: object) -> bool:
    return isinstance(value, torch.Tensor) and all(isinstance(s, int) for s in value.shape)


def _gather_of(clone: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, list[int]] | None:
    """(table, index, sizes of the final view) when ``clone`` ends the
    chain of the Note, else None."""
    memory_format = clone.kwargs.get("memory_format", torch.contiguous_format)
    if set(clone.kwargs) - {"memory_format"} or memory_format is not torch.contiguous_format:
        return None
    permute = _only_reader(clone, aten.permute.default)
    view = _only_reader(permute, SHAPE_VIEWS) if permute is not None else None
    gather = _only_reader(view, aten.index.Tensor) if view is not None else None
    if gather is None or permute is None or view is None:
        return None
    table, indices = gather.args[0], gather.args[1]
    if not (isinstance(table, torch.fx.Node) and isinstance(indices, list | tuple)):
        return None
    if len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
        return None
    index = indices[0]
    values = [n.meta.get("val") for n in (table, index, gather, view, clone)]
    if not all(_static(v) for v in values):
        return None
    table_value, index_value, gathered, viewed, copied = values
    if table_value.dim() != 2 or index_value.dim() != 1:
        return None
    if index_value.dtype not in (torch.int64, torch.int32):
        return None
    # The view splits the gathered rows and keeps the last dim; the permute
    # moves that dim to the front, the others in order.
    n = viewed.dim()
    if viewed.shape[-1] != gathered.shape[-1] or n < 2:
        return None
    if list(permute.args[1]) not in ([n - 1, *range(n - 1)], [-1, *range(n - 1)]):
        return None
    if not copied.is_contiguous():
        return None
    return table, index, list(copied.shape)


def gather_tables_in_final_layout(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Gathered tables in their final
    layout]); returns how many copies went. With ``recompile=False`` the
    caller regenerates ``gm``'s code."""
    graph = gm.graph
    rewritten = 0
    for clone in list(graph.find_nodes(op="call_function", target=aten.clone.default)):
        found = _gather_of(clone)
        if found is None:
            continue
        table, index, sizes = found
        like = clone.meta["val"]
        with detect_fake_mode([like]) or contextlib.nullcontext(), graph.inserting_before(clone):
            transposed = call_with_value(graph, aten.permute.default, (table, [1, 0]))
            gathered = call_with_value(graph, aten.index.Tensor, (transposed, [None, index]))
            result = call_with_value(graph, aten.view.default, (gathered, sizes))
        if not same_dims(result.meta["val"].stride(), like.stride()):
            for node in (result, gathered, transposed):
                graph.erase_node(node)
            continue
        permute = clone.args[0]
        view = permute.args[0]  # type: ignore[union-attr]
        gather = view.args[0]  # type: ignore[union-attr]
        clone.replace_all_uses_with(result)
        for node in (clone, permute, view, gather):
            graph.erase_node(node)  # type: ignore[arg-type]
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten
