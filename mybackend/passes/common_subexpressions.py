"""Common subexpressions of a joint graph, merged before the min-cut partitioner.

Note [Our own common-subexpression pass]
The min-cut partitioner first merges nodes that compute the same thing
(``torch._functorch.config.cse``), so that what it saves or recomputes is
counted once. Torch's pass imports ``torch._inductor.pattern_matcher`` for
two small helpers, and with it most of Inductor's lowering: 0.7-0.85 s on
the development machine's CPU, paid by the first training graph a process
compiles with mybackend, which otherwise never loads Inductor. So
``_partition`` (mybackend/aot.py) runs this pass and the partitioner runs
with its own turned off. The rules are the same, so the partitioner sees
the same graph (tests/unit/test_passes_common_subexpressions.py compares the
forward and backward graphs it makes on ResNet-50- and GPT-2-like blocks):

* Two call_function nodes merge when they have the same target and the same
  arguments after earlier merges (numbers compared with their type, so
  ``1`` and ``1.0`` differ; symbolic sizes by their node), and no mutating
  node lies between them: a mutation starts a new region, and only nodes of
  one region merge.
* Never merged: random ops (tagged ``nondeterministic_seeded``), fresh
  uninitialized allocations (``empty`` and kin), nodes that share memory
  with a graph output (distinct outputs stay distinct tensors), nodes whose
  value holds an unbacked symbol, and calls of Python callables other than
  the pure ones of ``operator``, ``math`` and torch's ``sym_*`` functions
  (getitem, size arithmetic); those others also count as mutations, their
  effects being unknown.

Merging is in place: the later node's readers read the earlier node, and
the later node is erased. Dead code is removed first, as the partitioner
does, so a dead node never stands in for a live one. Each merge leaves a
valid graph, so if the pass fails midway the partitioner runs with torch's
pass on what it left (``min_cut_partition``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef

aten = torch.ops.aten

_UNINITIALIZED = frozenset(
    {
        aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
        aten.new_empty_strided, aten.empty_permuted,
    }
)  # fmt: skip


def eliminate_common_subexpressions(graph: torch.fx.Graph) -> int:
    """Merges the common subexpressions of ``graph`` in place; returns how
    many nodes were erased (Note [Our own common-subexpression pass])."""
    graph.eliminate_dead_code()
    kept_apart = _sharing_output_memory(graph)
    seen: dict[Any, tuple[torch.fx.Node, int]] = {}
    region = 0
    erased = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if _mutates(node):
            region += 1
        if node in kept_apart or not _mergeable(node):
            continue
        key = _key(node)
        if key is None:
            continue
        earlier = seen.get(key)
        if earlier is not None and earlier[1] == region:
            node.replace_all_uses_with(earlier[0])
            graph.erase_node(node)
            erased += 1
        else:
            seen[key] = (node, region)
    return erased


_PURE_SYMBOLIC = frozenset(
    {
        torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not,
        torch.sym_sum, torch.sym_ite, torch._sym_sqrt,  # type: ignore[attr-defined]
    }
)  # fmt: skip


_PURE_OPERATORS = frozenset(
    {
        operator.getitem, operator.add, operator.sub, operator.mul, operator.truediv,
        operator.floordiv, operator.mod, operator.pow, operator.neg, operator.pos,
        operator.abs, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
        operator.ge, operator.and_, operator.or_, operator.xor, operator.not_,
        operator.invert, operator.lshift, operator.rshift, operator.index, operator.truth,
    }
)  # fmt: skip


def _pure_callable(target: Any) -> bool:
    """Python callables of FX graphs without side effects: getitem, size arithmetic."""
    return (
        target in _PURE_SYMBOLIC
        or target in _PURE_OPERATORS
        or getattr(target, "__module__", None) == "math"
    )


def _mutates(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable or node.kwargs.get("out") is not None
    return not _pure_callable(target)


def _mergeable(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
            return False
        if target.overloadpacket in _UNINITIALIZED:
            return False
    elif not _pure_callable(target):
        return False
    val = node.meta.get("val")
    return not (val is not None and free_unbacked_symbols(val))


def _sharing_output_memory(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Nodes whose value shares a storage with a value the graph returns."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    returned = {s for n in output.all_input_nodes if (s := _storage(n)) is not None}
    return {n for n in graph.nodes if (s := _storage(n)) is not None and s in returned}


def _storage(node: torch.fx.Node) -> StorageWeakRef | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except NotImplementedError:  # no storage (sparse, some subclasses)
        return None


class _Unhashable(Exception):
    pass


def _key(node: torch.fx.Node) -> Any:
    """A hashable stand-in for (target, args, kwargs); None if there is none."""
    try:
        key = (node.target, _hashable(node.args), _hashable(node.kwargs))
        hash(key)
    except (_Unhashable, TypeError):
        return None
    return key


def _hashable(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return ("node", value)
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ("sym", value.node)
    if isinstance(value, torch.Tensor):
        raise _Unhashable  # a constant tensor: compared by identity would be wrong
    if isinstance(value, slice):
        return ("slice", _hashable(value.start), _hashable(value.stop), _hashable(value.step))
    return (type(value), value)
