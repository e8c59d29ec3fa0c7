"""Hoisted parameter work: what reads only parameters runs once per version.

Note [Hoisted parameter work]
In an inference graph, some nodes read nothing but parameters and buffers
(aot_autograd's static inputs): the channels-last copies of convolution
weights (Note [Channels-last planning]), batch norm's per-channel scale and
shift (mybackend/decompositions.py), casts of weights (autocast's), padded
weights (Note [Aligned matrix products]). Eager recomputes them on every
call; so does a compiled graph that keeps them, which is the default. With
the option ``hoist_parameter_work`` this pass moves them into a separate
``prepare`` graph whose results become extra inputs of the main graph. At
run time ``HoistedValues`` runs ``prepare`` eagerly on the first call and
again only when a parameter it reads changes: its key is each such input's
tensor, data pointer, device and version counter (Note [Watching hoisted
inputs]). Assigning ``param.data = ...``, an optimizer step,
``load_state_dict``, ``copy_`` under ``no_grad``, a dtype or device
conversion and any other in-place op on the parameter change one of them.

The option is opt-in, like Inductor's freezing, because one common edit
changes none of them: an in-place op on ``param.data`` (``p.data.mul_(1.5)``,
a hand-written weight update through ``.data``) writes the parameter's
memory through a tensor that shares its storage but not its version
counter. The hoisted values then stay those of the old weights, and
nothing can tell: ResNet-50's compiled output, its weights scaled by 1.5
that way after a first call, differed from eager's by a relative error of
0.60 (issue 32). Without hoisting every call reads the parameters as they
are, whatever wrote them (tests/models/test_parameter_edits.py and
tests/gpu/test_parameter_edits.py). Turn it on only for a model whose
weights are edited, if at all, through the parameters themselves.

The hoisted values are static inputs of the main graph, so CUDA graphs
capture them at their own addresses; a recomputation gives them new
addresses and so a new capture (bounded by ``max_cuda_graphs``). Without
hoisting, the parameters themselves are the static inputs: a replay reads
them at their captured addresses, so in-place edits, ``.data`` ones too,
are seen, and a new tensor behind a parameter is a new capture.

What is hoisted: nodes whose every tensor argument is a static input or an
already hoisted node, that are functional ATen overloads (no mutation, no
random op, one tensor output) and that compute something (a chain of views
alone stays in the main graph: it costs nothing there and keeps aliasing
the parameter). The price is memory: the hoisted values stay alive between
calls, as a frozen model's folded constants would.

Only inference graphs are hoisted: in training, parameters change every
step, and the backward graph needs the forward's own values.

Note [Constants are always hoisted]
Some nodes read no input at all: index tensors made from aranges (those
of core ATen's decomposed ``roll`` were Swin's, before Note [Rolls as
concatenations] in mybackend/ops/roll.py), position ids, causal masks, relative-position
buckets. Eager launches their kernels on
every call and so did a compiled graph, captured or not: Swin-T ran about
40 such kernels per step, which at batch 1 under CUDA graphs is a tenth of
its time. Their values cannot change, so nothing needs watching and the
caveat above does not apply: they are hoisted with or without the option
(``hoist_parameter_work(..., static_inputs=[])`` hoists exactly them). Two
limits. A constant the graph returns, or a view of one, stays in the main
graph: the caller owns an output and may write to it, and a hoisted value
is shared by every call. A constant over ``MAX_CONSTANT_BYTES`` stays too:
a hoisted value lives as long as the compiled graph, where eager frees it
after the call. A tensor constant of the graph (``get_attr``: a lifted
``torch.tensor(...)``) is a constant too.

Note [Host scalars hoisted to the device]
``x / torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float))`` (DeBERTa's
attention scale, in every layer) makes a 0-dim tensor on the host, which
elementwise ops on the GPU read as a scalar. One host tensor in a graph
keeps the whole graph out of CUDA graphs (capture_blocker in
src_cpp/runtime/cuda_graph_runner.cpp): DeBERTa-v3 under
``reduce-overhead`` ran no faster than without it. A hoisted 0-dim host
constant whose every reader left in the main graph is an elementwise op
with its result on one CUDA device moves there in ``prepare``
(``_to_copy``): an elementwise op computes the same with a 0-dim operand on
the host or on its device (both take part in type promotion as 0-dim
tensors), and the main graph then holds no host tensor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch.fx.node import map_arg

from mybackend import _C
from mybackend.lowering.graph_modules import new_graph_module

aten = torch.ops.aten


def _node_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    map_arg((node.args, node.kwargs), found.append)
    return found


def _has_symbolic_scalar(node: torch.fx.Node) -> bool:
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    flat, _ = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    return any(isinstance(a, symbolic) for a in flat)


def is_view_op(target: torch._ops.OpOverload) -> bool:
    """Whether the op's result may share memory with an argument."""
    return any(r.alias_info is not None for r in target._schema.returns)


def view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose memory ``node`` may share, following view ops."""
    while isinstance(node.target, torch._ops.OpOverload) and is_view_op(node.target):
        base = node.args[0] if node.args else None
        if not isinstance(base, torch.fx.Node):
            break
        node = base
    return node


def _hoistable_op(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return isinstance(node.meta.get("val"), torch.Tensor) and not _has_symbolic_scalar(node)


@dataclasses.dataclass
class HoistPlan:
    """The main graph (original inputs, then the hoisted values) and ``prepare``."""

    main: torch.fx.GraphModule
    prepare: torch.fx.GraphModule
    prepare_inputs: list[int]  # positions of the main graph's inputs ``prepare`` reads
    example_inputs: list[Any]  # the main graph's: the original ones, then the hoisted values
    hoisted_inputs: list[int]  # positions of the hoisted values among the main graph's inputs


# Note [Constants are always hoisted]: the largest input-free value hoisted.
MAX_CONSTANT_BYTES = 16 * 1024 * 1024


def returned_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes the graph returns, and those they are views of."""
    found: set[torch.fx.Node] = set()
    stack = [a for n in gm.graph.find_nodes(op="output") for a in _node_args(n)]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and is_view_op(target):
            stack.extend(_node_args(node))
    return found


def _nbytes(node: torch.fx.Node) -> int:
    value = node.meta["val"]
    return int(value.untyped_storage().nbytes()) if value.numel() else 0


def _scalar_device(node: torch.fx.Node, derived: set[torch.fx.Node]) -> torch.device | None:
    """The CUDA device a 0-dim host constant can move to: that of every
    reader left in the main graph, each an elementwise op with its result
    there (Note [Host scalars hoisted to the device])."""
    value = node.meta["val"]
    if value.device.type != "cpu" or value.dim() != 0:
        return None
    devices = set()
    for user in node.users:
        if user in derived:
            continue
        target = user.target
        result = user.meta.get("val")
        if not isinstance(target, torch._ops.OpOverload) or torch.Tag.pointwise not in target.tags:
            return None
        if not isinstance(result, torch.Tensor) or result.device.type != "cuda":
            return None
        devices.add(result.device)
    return devices.pop() if len(devices) == 1 else None


def _on_device(value: torch.Tensor, device: torch.device | None) -> torch.Tensor:
    if device is None:
        return value
    fake_mode = detect_fake_mode([value])
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        return value.to(device)


def hoist_parameter_work(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], static_inputs: Sequence[int]
) -> HoistPlan | None:
    """Splits ``gm`` (Note [Hoisted parameter work]); None when nothing is worth it.

    With ``static_inputs`` empty only constants move (Note [Constants are
    always hoisted])."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = {placeholders[i] for i in static_inputs if i < len(placeholders)}
    returned = returned_nodes(gm)
    derived: set[torch.fx.Node] = set()  # hoistable, reading only static inputs
    input_free: set[torch.fx.Node] = set()  # hoistable, reading no input at all
    computes: dict[torch.fx.Node, bool] = {}
    for node in gm.graph.nodes:
        if node in returned:
            continue
        if node.op == "get_attr" and isinstance(node.meta.get("val"), torch.Tensor):
            # A tensor constant of the graph (a lifted torch.tensor(...)).
            input_free.add(node)
            derived.add(node)
            computes[node] = False
            continue
        if node.op != "call_function":
            continue
        args = _node_args(node)
        free = all(a in input_free for a in args)
        # The argument test first: most nodes read activations, and the op
        # test flattens every argument.
        if not (free or all(a in static or a in derived for a in args)):
            continue
        if not _hoistable_op(node):
            continue
        hoisted = True
        if free:
            input_free.add(node)
            hoisted = all(a in derived for a in args) and _nbytes(node) <= MAX_CONSTANT_BYTES
        if hoisted:
            derived.add(node)
            computes[node] = not is_view_op(node.target) or any(
                computes.get(a, False) for a in args
            )
    frontier = [
        n
        for n in gm.graph.nodes
        if n in derived and computes[n] and any(u not in derived for u in n.users)
    ]
    if not frontier:
        return None
    needed: set[torch.fx.Node] = set()
    stack = list(frontier)
    while stack:
        node = stack.pop()
        if node in needed or node not in derived:
            continue
        needed.add(node)
        stack.extend(_node_args(node))

    prepare_inputs = sorted(
        i for i, p in enumerate(placeholders) if any(u in needed for u in p.users)
    )
    prepare = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for i in prepare_inputs:
        env[placeholders[i]] = prepare.node_copy(placeholders[i])
    for node in gm.graph.nodes:
        if node in needed:
            env[node] = prepare.node_copy(node, lambda n: env[n])
    moved = {n: d for n in frontier if n in input_free and (d := _scalar_device(n, derived))}
    outputs = []
    values = []
    for node in frontier:
        value = env[node]
        if node in moved:  # Note [Host scalars hoisted to the device]
            value = prepare.call_function(aten._to_copy.default, (value,), {"device": moved[node]})
        outputs.append(value)
        values.append(_on_device(node.meta["val"], moved.get(node)))
    prepare.output(outputs)

    main = torch.fx.Graph()
    env = {}
    for node in placeholders:
        env[node] = main.node_copy(node)
    for k, node in enumerate(frontier):
        env[node] = main.placeholder(f"hoisted_{k}")
        env[node].meta = {**node.meta, "val": values[k]}
    # Dead code elimination drops what only prepare reads.
    for node in gm.graph.nodes:
        if node.op != "placeholder" and node not in env:
            env[node] = main.node_copy(node, lambda n: env[n])
    main.eliminate_dead_code()
    return HoistPlan(
        main=new_graph_module(gm, main),
        prepare=new_graph_module(gm, prepare),
        prepare_inputs=prepare_inputs,
        example_inputs=[*example_inputs, *values],
        hoisted_inputs=list(range(len(placeholders), len(placeholders) + len(values))),
    )


class HoistedValues:
    """The ``prepare`` graph's results, recomputed when an input it reads changes."""

    def __init__(self, prepare: Callable[..., Any], positions: Sequence[int]) -> None:
        self._prepare = prepare
        self._positions = list(positions)
        self._lock = threading.Lock()
        # Note [Watching hoisted inputs] (src_cpp/runtime/input_versions.h):
        # one pass in C++ per call, not a tuple per input in Python.
        self._versions = _C.InputVersions(list(self._positions))
        self._values: list[torch.Tensor] = []
        self.computed = 0  # how many times prepare ran (tests, explain)

    @classmethod
    def from_plan(cls, plan: HoistPlan) -> HoistedValues:
        """The values of a plan just made (a warm start has only its prepare graph)."""
        return cls(plan.prepare, plan.prepare_inputs)

    def values(self, inputs: list[Any]) -> list[torch.Tensor]:
        with self._lock:
            if self._versions.changed(inputs):
                self._values = []  # the old values go before the new ones are made
                read = [inputs[i] for i in self._positions]
                try:
                    with torch.no_grad():
                        self._values = list(self._prepare(*read))
                except BaseException:
                    self._versions.forget()  # the next call prepares again
                    raise
                self.computed += 1
            return self._values


class HoistedGraphFunction:
    """Calls a compiled main graph with the hoisted values appended (boxed)."""

    _boxed_call = True

    def __init__(self, compiled: Any, hoisted: HoistedValues) -> None:
        self.compiled = compiled
        self.hoisted = hoisted
        self.warm_recipe: Any = None  # set when warm start keeps it (mybackend/warm_start.py)

    def __call__(self, args: list[Any]) -> Any:
        call_args = [*args, *self.hoisted.values(args)]
        args.clear()
        return self.compiled(call_args)
