"""A softmax computed before the shape view it was handed.

Note [Softmaxes before their views]
Attention written without SDPA often reshapes its scores just before the
softmax. BART, OPT and Whisper's eager attention add the mask on
``[B, H, T, S]`` and view the sum back to ``[B * H, T, S]``. Swin's shifted
windows add the shift mask on ``[B, windows, H, N, N]`` and view back to
``[B * windows, H, N, N]``:

    scores -> view [B, H, T, S] -> add(mask) -> view [B * H, T, S] -> softmax

The softmax kernel takes the elementwise ops that only it reads as its
prologue (Note [Softmax prologues with broadcast inputs]), but only ops of
its input's own shape. The view in between hides the add, which then runs
as a kernel of its own and stores the sum. A softmax over the last dim of a
view that keeps that dim computes the same rows as one over the tensor
viewed, in the same order, when both are contiguous. So the pass computes
the softmax first and views its result:

    scores -> view [B, H, T, S] -> add(mask) -> softmax -> view [B * H, T, S]

and the add joins the softmax kernel.

What is matched: a ``_softmax`` or ``_log_softmax`` of a static-shaped CUDA
tensor over its last dim, whose input is a shape view of a contiguous
tensor with the same last dim. The softmax must not be a graph output
(training's forward returns it for the backward: left alone).
"""

from __future__ import annotations

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import SHAPE_VIEWS, is_static_contiguous
from mybackend.passes.fake_prop import call_with_value
from mybackend.passes.hoist import returned_nodes

aten = torch.ops.aten
_SOFTMAXES = (aten._softmax.default, aten._log_softmax.default)


def _viewed_softmax(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor a last-dim softmax's input views, when the softmax can run
    on it instead (Note [Softmaxes before their views])."""
    view = node.args[0]
    if not isinstance(view, torch.fx.Node) or view.target not in SHAPE_VIEWS:
        return None
    source = view.args[0]
    if not isinstance(source, torch.fx.Node):
        return None
    before, after = source.meta.get("val"), view.meta.get("val")
    if not (is_static_contiguous(before) and is_static_contiguous(after)) or after.dim() == 0:
        return None
    if before.device.type != "cuda" or before.shape[-1] != after.shape[-1]:
        return None
    dim = node.args[1]
    if not isinstance(dim, int) or dim % after.dim() != after.dim() - 1:
        return None
    return source


def softmaxes_before_views(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Softmaxes before their views]);
    returns how many softmaxes now read the tensor they were given a view of."""
    graph = gm.graph
    softmaxes = [
        n for target in _SOFTMAXES for n in graph.find_nodes(op="call_function", target=target)
    ]
    if not softmaxes:
        return 0
    returned = returned_nodes(gm)
    rewritten = 0
    for node in softmaxes:
        if node in returned:
            continue
        source = _viewed_softmax(node)
        if source is None:
            continue
        view = node.args[0]
        shape = list(view.meta["val"].shape)
        fake_mode = detect_fake_mode([source.meta["val"]])
        if fake_mode is None:
            continue
        with fake_mode, graph.inserting_before(node):
            early = call_with_value(graph, node.target, (source, -1, *node.args[2:]))
            viewed = call_with_value(graph, aten.view.default, (early, shape))
        early.meta = {**node.meta, "val": early.meta["val"]}
        node.replace_all_uses_with(viewed)
        graph.erase_node(node)
        if not view.users:
            graph.erase_node(view)
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten
