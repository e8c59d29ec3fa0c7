"""Copies that compute nothing are dropped: pads by zero, clones that keep
their input's strides, and expands to the input's own shape.

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
(``copy_``, an input mutation, or the ``_foreach_copy_`` and
``_foreach_add_`` that batch such writes: Note [Batched input mutations]),
whose readers must see the old values.

Note [Clones that keep their layout]
aot_autograd's decompositions write a dropout outside training as
``input.clone()``, whatever its probability: every ``nn.Dropout`` and
``F.dropout(training=False)`` of an inference graph is a full copy of its
input (Swin-T: 48 of them a step, after its attention softmaxes and its
projections; most transformer blocks have two or three). ``torch.matmul``
of batched operands expands each to the broadcast shape first, an expand to
the operand's own sizes when nothing broadcasts, which eager's matmul
never launches anything for but which sits between the operand's producer
and its reader in the graph: Swin's query scaling and the contiguous copy
the batched product needs were two kernels for that reason. The same
conditions as a pad's hand such a clone's or expand's readers its input:
the result has the input's sizes and strides (statically) and the input is
dense, the result is not returned nor viewed by a returned value, and the
graph does not write into the input. A clone that changes the layout (a
contiguous copy of a permuted tensor) moves elements and stays.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from mybackend.passes.hoist import returned_nodes, view_base

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
    return _same_layout(before, after)


def _same_layout(before: object, after: object) -> bool:
    """Both tensors have the same sizes and strides (statically), and
    ``before`` is dense: a copy from one to the other moves every element to
    where it was."""
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    if before.dim() != after.dim() or not _is_dense(before):
        return False
    pairs = [
        *zip(before.shape, after.shape, strict=True),
        *zip(before.stride(), after.stride(), strict=True),
    ]
    return all(statically_known_true(a == b) for a, b in pairs)


def _keeps_layout(node: torch.fx.Node) -> bool:
    """A clone (any memory format) whose result has its input's layout, or an
    expand to the input's own sizes (``_drop`` found it by its target)."""
    return _same_layout(node.args[0].meta.get("val"), node.meta.get("val"))


_IDENTITY_TARGETS = (aten.clone.default, aten.expand.default)


# What writes into an input: aot_autograd's epilogue, and that epilogue
# batched (Note [Batched input mutations], which runs before these passes).
_WRITES = (aten.copy_.default, aten._foreach_copy_.default, aten._foreach_add_.Scalar)


def _written(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The tensors the graph writes into, as the bases of their views."""
    written: set[torch.fx.Node] = set()
    for target in _WRITES:
        for node in gm.graph.find_nodes(op="call_function", target=target):
            destination = node.args[0]
            for d in destination if isinstance(destination, list | tuple) else [destination]:
                if isinstance(d, torch.fx.Node):
                    written.add(view_base(d))
    return written


def _drop(
    gm: torch.fx.GraphModule,
    targets: tuple[torch._ops.OpOverload, ...],
    adds_nothing: Callable[[torch.fx.Node], bool],
    recompile: bool,
) -> int:
    """Hands the readers of each node of ``targets`` for which
    ``adds_nothing`` holds its input, unless it is returned or its input is
    written by the graph; returns how many were dropped."""
    nodes = [n for t in targets for n in gm.graph.find_nodes(op="call_function", target=t)]
    if not nodes:
        return 0
    returned = returned_nodes(gm)
    written = _written(gm)
    dropped = 0
    for node in nodes:
        source = node.args[0]
        if node in returned or not isinstance(source, torch.fx.Node):
            continue
        if view_base(source) in written or not adds_nothing(node):
            continue
        node.replace_all_uses_with(source)
        gm.graph.erase_node(node)
        dropped += 1
    if dropped and recompile:
        gm.recompile()
    return dropped


def drop_empty_pads(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Pads that add nothing]); returns how
    many pads were dropped."""
    return _drop(gm, (aten.constant_pad_nd.default,), _adds_nothing, recompile)


def drop_identity_copies(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Clones that keep their layout]);
    returns how many clones and expands were dropped."""
    return _drop(gm, _IDENTITY_TARGETS, _keeps_layout, recompile)
