"""Each batch-norm backward sum gets its own copy of the ReLU gradient it reads.

Note [A ReLU gradient recomputed by its batch-norm sums]
In ResNet training most batch-norm backwards read the ReLU gradient
``where(relu_out <= 0, 0, dy)``, and two kernels read it: the per-channel
sums (``mybackend::batch_norm_backward_reduce``, a generated norm kernel)
and the input-gradient kernel that runs after them (elementwise, it needs
the sums). With one node and two readers in different kernels, the masked
gradient is a kernel of its own and is stored: it writes a pass over the
activation and both readers read it back (48 launches and about 1 ms of a
12.6 ms ResNet-50 step at batch 64, H100).

This pass, run on a CUDA graph just before lowering when generated kernels
are on, gives each sum its own copy of the elementwise ops that compute its
``grad_out``. The sums then take the copy as their prologue (Note [Norm
prologues] in src_cpp/fusion/norm_prologue.h: they compute the gradient as
they load it), and the original ops have the input-gradient kernel as their
only reader and fuse into it: the masked gradient is never stored, one
launch and a write and a read of the activation less each time.

A copy is made only where it removes the store: every other reader of
``grad_out`` is an elementwise op of its shape that no path from ``grad_out``
reaches through a non-elementwise node (the other batch-norm sums aside,
each of which gets its own copy). At a residual junction the masked
gradient also flows down the skip connection into an addition after the
branch's convolution backwards: it is stored for that reader anyway, and
the sums read it as they are. The ops copied are ATen pointwise operators
(``torch.Tag.pointwise``) with ``grad_out``'s shape, at most
``MAX_COPIED_OPS`` of them, whose tensors read from outside are stored with
the strides of the batch norm's input (what the kernel reads densely) or
are ``scalar_tensor`` constants (which the kernel inlines). The copies
compute the same values: the graph's results do not change, and its eager
run (fallback, accuracy check) is the same function.
"""

from __future__ import annotations

import torch
import torch.fx

from mybackend.passes.elementwise import is_elementwise

aten = torch.ops.aten

# A ReLU gradient is two ops (le, where), three after a residual add; longer
# chains are unlikely to pay for computing them twice.
MAX_COPIED_OPS = 8


def copy_batch_norm_gradients(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns how many sums got a copy. With
    ``recompile=False`` the caller regenerates ``gm``'s code."""
    reduce_op = getattr(torch.ops.mybackend, "batch_norm_backward_reduce", None)
    if reduce_op is None:
        return 0
    graph = gm.graph
    position = {node: k for k, node in enumerate(graph.nodes)}
    copied = 0
    seen: set[torch.fx.Node] = set()
    for node in list(graph.nodes):
        if node.target is not reduce_op.default:
            continue
        grad, x = node.args[0], node.args[1]
        if not isinstance(grad, torch.fx.Node) or grad in seen:
            continue
        seen.add(grad)
        sums = [u for u in grad.users if u.target is reduce_op.default]
        others = [u for u in grad.users if u.target is not reduce_op.default]
        if not others and len(sums) == 1:
            continue  # its only reader: the sums take the ops as they are
        chain = _producers(grad, position)
        if not chain or not _readable_leaves(chain, x):
            continue
        if others and not _fuse_with_readers(grad, sums, others, position):
            continue
        # With no other reader, the last sum keeps the original ops.
        for reader in sums if others else sums[:-1]:
            reader.replace_input_with(grad, _copy(graph, chain, grad, reader))
            copied += 1
    if copied and recompile:
        gm.recompile()
    return copied


def _tensor(node: object) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _producers(grad: torch.fx.Node, position: dict[torch.fx.Node, int]) -> list[torch.fx.Node]:
    """The pointwise ops of grad's shape computing grad, in graph order
    (`position`); empty when there are none or too many."""
    value = _tensor(grad)
    if value is None or value.device.type != "cuda" or not is_elementwise(grad):
        return []
    chain: list[torch.fx.Node] = []
    pending = [grad]
    while pending:
        node = pending.pop()
        if node in chain:
            continue
        chain.append(node)
        if len(chain) > MAX_COPIED_OPS:
            return []
        for source in node.all_input_nodes:
            found = _tensor(source)
            if is_elementwise(source) and found is not None and found.shape == value.shape:
                pending.append(source)
    return sorted(chain, key=position.__getitem__)


def _readable_leaves(chain: list[torch.fx.Node], x: object) -> bool:
    """Whether the kernel can read every tensor the chain reads from outside:
    x's shape and strides (read densely, as x), or a constant scalar_tensor."""
    x_value = _tensor(x)
    if x_value is None:
        return False
    members = set(chain)
    for node in chain:
        for source in node.all_input_nodes:
            if source in members:
                continue
            value = _tensor(source)
            if value is None:
                return False
            if value.dim() == 0:
                if not _constant_scalar_tensor(source):
                    return False
            elif value.shape != x_value.shape or value.stride() != x_value.stride():
                return False
    return True


def _constant_scalar_tensor(node: torch.fx.Node) -> bool:
    return (
        node.target is aten.scalar_tensor.default
        and len(node.args) == 1
        and isinstance(node.args[0], (bool, int, float))
    )


def _fuse_with_readers(
    grad: torch.fx.Node,
    sums: list[torch.fx.Node],
    others: list[torch.fx.Node],
    position: dict[torch.fx.Node, int],
) -> bool:
    """Whether grad's other readers can share one kernel with the ops that
    compute grad once the sums read copies: each is pointwise of grad's
    shape, and no path from grad reaches it through a node that is not (a
    convolution backward, say), walking forward in graph order."""
    shape = _tensor(grad).shape  # type: ignore[union-attr]
    for reader in others:
        value = _tensor(reader)
        if not is_elementwise(reader) or value is None or value.shape != shape:
            return False
    last = max(position[reader] for reader in others)
    excluded = set(sums)
    clean = {grad}  # reached from grad through pointwise nodes only
    dirty: set[torch.fx.Node] = set()
    node = grad.next
    while node.op != "root" and position.get(node, -1) <= last:
        # Copies made for earlier sums have no position; they read no grad.
        if node not in excluded:
            inputs = node.all_input_nodes
            if any(i in dirty for i in inputs):
                dirty.add(node)
            elif any(i in clean for i in inputs):
                (clean if is_elementwise(node) else dirty).add(node)
        node = node.next
    return not any(reader in dirty for reader in others)


def _copy(
    graph: torch.fx.Graph, chain: list[torch.fx.Node], grad: torch.fx.Node, reader: torch.fx.Node
) -> torch.fx.Node:
    """Copies of the chain's nodes, placed just before `reader`; the copy of grad."""
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    with graph.inserting_before(reader):
        for node in chain:
            copy = graph.node_copy(node, lambda n: copies.get(n, n))
            copy.meta = dict(node.meta)
            copies[node] = copy
    return copies[grad]
