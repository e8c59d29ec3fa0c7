"""Pads that add nothing are dropped.

Note [Pads that add nothing]
Models pad a tensor up to a multiple of a window or a stride whatever its
size: Swin's window attention calls ``F.pad(x, (0, 0, 0, pad_r, 0,
pad_b))`` in every block, its patch merging does the same, and on the
usual sizes every amount is 0. ATen's ``constant_pad_nd`` then returns a
copy, and so did the compiled graph: Swin-T ran 15 full copies of its
activations per step (device-to-device memcpys) that compute nothing.

In a functional graph a copy is needed only where someone could tell the
two tensors apart, so this pass hands the pad's readers its input instead
when: every amount is the integer 0; the pad's result has its input's
strides and the input is dense (a permuted input would come out with other
strides, which its readers' plans assumed); the result is not returned,
nor a view of it (the caller owns an output, which must not alias another
value of the graph); and the graph does not write into the input
(``copy_``, an input mutation), whose readers must see the old values.
"""

from __future__ import annotations

import torch
import torch.fx

from mybackend.passes.hoist import is_view_op, returned_nodes

aten = torch.ops.aten


def _is_dense(value: torch.Tensor) -> bool:
    return bool(torch._prims_common.is_non_overlapping_and_dense_or_false(value))


def _adds_nothing(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.constant_pad_nd.default:
        return False
    source, pads = node.args[0], node.args[1]
    if not isinstance(source, torch.fx.Node) or not isinstance(pads, (list, tuple)):
        return False
    if not all(type(p) is int and p == 0 for p in pads):
        return False
    before, after = source.meta.get("val"), node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    return before.stride() == after.stride() and _is_dense(before)


def _base(value: object) -> object:
    """The tensor ``value`` is a chain of views of."""
    while (
        isinstance(value, torch.fx.Node)
        and isinstance(value.target, torch._ops.OpOverload)
        and is_view_op(value.target)
        and value.args
    ):
        value = value.args[0]
    return value


def drop_empty_pads(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Pads that add nothing]); returns how
    many pads were dropped."""
    pads = [n for n in gm.graph.find_nodes(op="call_function", target=aten.constant_pad_nd.default)]
    if not pads:
        return 0
    returned = returned_nodes(gm)
    written = {
        _base(n.args[0]) for n in gm.graph.find_nodes(op="call_function", target=aten.copy_.default)
    }
    dropped = 0
    for node in pads:
        if node in returned or _base(node.args[0]) in written or not _adds_nothing(node):
            continue
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
        dropped += 1
    if dropped and recompile:
        gm.recompile()
    return dropped
