"""Reductions over dims that memory holds outside the kept ones, read in
memory order.

Note [Reductions in memory order]
A squeeze-excitation block averages a channels-last activation over its
spatial dims: ``mean(x, [2, 3], keepdim=True)`` on an [N, C, H, W] tensor
whose memory is [N, H, W, C]. In logical order the reduced dims are the
inner ones, so the planner saw a row reduction of a strided input, which it
leaves to ATen (Note [Lone column reductions]), and ATen's kernel took 7 us
a call at batch 1: 113 us for EfficientNet-B0's 16 calls, 17 % of its step
with CUDA graphs, where Inductor's fused means took 1-2 us each (H200,
2026-11-27). In memory order the same reduction is a column reduction of a
contiguous [N, H * W, C], which the planner generates, split over the SMs
when it has few results (Note [Split outer reductions] in
src_cpp/codegen/device/mb_reduction.cuh).

So the reduction reads its input through ``permute(x, p)``, p the dims in
memory order (a contiguous view), over the reduced dims' places in p, and
``as_strided`` gives the contiguous result the original result's sizes and
strides: the same memory, so every reader sees the metadata it was traced
with and nothing downstream changes. Rewritten only where that holds: x is
dense and not in logical order, the reduced dims are one range in memory
order, every size is an integer, and the original result's strides (over
dims longer than 1) are those of the contiguous result. And only where the
reduction stands alone: an elementwise reader of its result, or an
elementwise producer of its input read by nothing else, would fuse with it
in logical order, and the views the rewrite puts between them would keep
them apart.
"""

from __future__ import annotations

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import is_elementwise
from mybackend.passes.fake_prop import call_with_value

aten = torch.ops.aten
REDUCTIONS = (aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.amin.default)


def reduce_in_memory_order(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns how many reductions now read their
    input in memory order. With ``recompile=False`` the caller regenerates
    ``gm``'s code."""
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in REDUCTIONS:
            continue
        plan = _memory_order_plan(node)
        if plan is None or _fuses_in_logical_order(node):
            continue
        order, reduced = plan
        source = node.args[0]
        fake_mode = detect_fake_mode([source.meta["val"]])
        if fake_mode is None:
            continue
        traced: torch.Tensor = node.meta["val"]
        with graph.inserting_before(node), fake_mode:
            permuted = call_with_value(graph, aten.permute.default, (source, order))
            result = call_with_value(graph, node.target, (permuted, reduced, False), node.kwargs)
            viewed = call_with_value(
                graph, aten.as_strided.default, (result, list(traced.shape), list(traced.stride()))
            )
        viewed.meta = {**node.meta, "val": viewed.meta["val"]}
        node.replace_all_uses_with(viewed)
        graph.erase_node(node)
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten


def _memory_order_plan(node: torch.fx.Node) -> tuple[list[int], list[int]] | None:
    """(p, the reduced dims' places in p) when the rewrite applies, else None."""
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    traced = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(traced, torch.Tensor):
        return None
    if not _plain_ints(value) or not _plain_ints(traced) or value.dim() < 2:
        return None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not dims:  # every dim: memory order does not matter
        return None
    keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    rank = value.dim()
    reduced = sorted({d % rank for d in dims})
    # Dims by decreasing stride; size-1 dims (any stride) keep their place.
    order = sorted(range(rank), key=lambda d: (-value.stride(d) if value.shape[d] > 1 else 0, d))
    if order == list(range(rank)) or not value.permute(order).is_contiguous():
        return None
    places = sorted(order.index(d) for d in reduced)
    if places != list(range(places[0], places[-1] + 1)):
        return None
    # The contiguous result holds the kept dims in memory order.
    kept = [d for d in order if d not in reduced]
    stride, strides = 1, {}
    for d in reversed(kept):
        strides[d] = stride
        stride *= value.shape[d]
    logical_kept = [d for d in range(rank) if d not in reduced]
    if traced.storage_offset() != 0:
        return None
    for i in range(traced.dim()):
        source_dim = i if keepdim else logical_kept[i]
        if traced.shape[i] > 1 and traced.stride(i) != strides.get(source_dim):
            return None
    return order, places


def _plain_ints(t: torch.Tensor) -> bool:
    return all(type(s) is int for s in (*t.shape, *t.stride(), t.storage_offset()))


def _fuses_in_logical_order(node: torch.fx.Node) -> bool:
    """An elementwise epilogue or prologue the planner would give it."""
    source = node.args[0]  # a node: _memory_order_plan read its value
    if is_elementwise(source) and list(source.users) == [node]:
        return True
    return any(is_elementwise(user) for user in node.users)
