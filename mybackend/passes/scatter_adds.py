"""A sum of a tensor and a scatter into zeros: one scatter into the tensor.

Note [Scatters into their addend]
A tied embedding's gradient is the sum of two gradients: the output
layer's (a dense [vocab, dim] product) and the embedding lookup's, which
aot_autograd traces as ``index_put(full(0), [tokens], rows, accumulate=True)``
(``embedding_dense_backward``'s decomposition). ATen then fills a
[vocab, dim] f32 tensor with zeros, scatters the token rows into it and
adds the whole of it to the other gradient: for GPT-2 (50257 x 768 f32,
154 MB) a fill, and an add that reads 308 MB and writes 154 MB, about
0.2 ms on an H100 for a scatter of a few thousand rows.

``add(a, index_put(full(0), indices, values, True))`` is
``index_put(a, indices, values, True)``: the scatter accumulates into a
copy of ``a`` instead of into zeros. The rounding differs only in order
(``a + (v1 + v2)`` becomes ``(a + v1) + v2`` for a row hit twice). When
``a`` is a fresh tensor of the graph read by nothing else (GPT-2: the f32
cast of the output layer's gradient), the scatter writes into it in place
(``index_put_``): the functional form copies it first (154 MB, a
device-to-device copy of 0.1 ms). What is rewritten: a ``full`` of 0
read only by an accumulating ``index_put`` read only by an ``add`` (no
``alpha``) whose other operand has the scatter's shape and dtype, so the
add neither broadcasts nor promotes.

The decomposition table keeps ``embedding_dense_backward`` whole (its
CUDA kernel sums a row's duplicate indices in parallel, where
``index_put``'s serializes them: Note [Embedding gradients stay whole]),
so the lookup's gradient usually reaches this pass as that op. A sum
``add(a, embedding_dense_backward(rows, tokens, V, -1, False))`` is
folded the same way, into ``index_put(a, [tokens], rows, True)``: with no
padding index and no frequency scaling the op is exactly that scatter
into zeros. Tokens are in range, since the forward lookup checked them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

aten = torch.ops.aten
# Operators whose result is a new tensor of its own.
_FRESH_RESULTS = (
    aten._to_copy.default,
    aten.clone.default,
    aten.mm.default,
    aten.add.Tensor,
    aten.mul.Tensor,
    torch.ops.prims.convert_element_type.default,
)


def fold_scatter_adds(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns how many sums were folded. With
    ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    folded = 0
    for add in list(graph.nodes):
        if add.op != "call_function" or add.target is not aten.add.Tensor or add.kwargs:
            continue
        for scatter, addend in ((add.args[1], add.args[0]), (add.args[0], add.args[1])):
            operands = _scatter_operands(scatter)
            if operands is not None and _same_type(addend, scatter):
                indices, values, dead_inputs = operands
                in_place = _fresh_and_read_once(addend)
                target = aten.index_put_.default if in_place else aten.index_put.default
                with graph.inserting_before(add):
                    into = graph.call_function(target, (addend, indices, values, True))
                into.meta = dict(add.meta)
                add.replace_all_uses_with(into)
                for dead in (add, scatter, *dead_inputs):
                    graph.erase_node(dead)
                folded += 1
                break
    if folded and recompile:
        gm.recompile()
    return folded


def _scatter_operands(node: Any) -> tuple[Any, Any, tuple[torch.fx.Node, ...]] | None:
    """For a scatter-add into zeros read once (an accumulating index_put into
    a zero fill read once, or a plain embedding_dense_backward): its index
    list, its values and the nodes only it reads; else None."""
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    if node.target is aten.embedding_dense_backward.default:
        rows, tokens, _, padding_idx, scale_grad_by_freq = node.args
        if padding_idx >= 0 or scale_grad_by_freq:
            return None
        return [tokens], rows, ()
    if node.target is not aten.index_put.default:
        return None
    if len(node.args) != 4 or node.args[3] is not True:
        return None
    zeros, indices, values, _ = node.args
    if not (
        isinstance(zeros, torch.fx.Node)
        and zeros.target is aten.full.default
        and len(zeros.users) == 1
        and len(zeros.args) == 2
        and zeros.args[1] == 0
    ):
        return None
    return indices, values, (zeros,)


def _same_type(addend: Any, scatter: torch.fx.Node) -> bool:
    if not isinstance(addend, torch.fx.Node):
        return False
    a, s = addend.meta.get("val"), scatter.meta.get("val")
    return (
        isinstance(a, torch.Tensor)
        and isinstance(s, torch.Tensor)
        and a.shape == s.shape
        and a.dtype == s.dtype
        and a.device == s.device
    )


def _fresh_and_read_once(node: torch.fx.Node) -> bool:
    """A tensor this graph computes (no input, no view of one) that only the
    add reads: writing into it changes nothing anyone else sees."""
    value = node.meta.get("val")
    return (
        node.op == "call_function"
        and len(node.users) == 1
        and isinstance(value, torch.Tensor)
        and not value._is_view()
        and node.target in _FRESH_RESULTS
    )
