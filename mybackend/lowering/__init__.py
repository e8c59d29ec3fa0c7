"""Stage 3: lower an ATen FX graph (aot_autograd's output) into the C++ IR.

Input: a GraphModule whose call_function targets are ATen/prims overloads,
symbolic-size arithmetic and, rarely, other Python callables; each node's
``meta["val"]`` holds FakeTensor metadata. Output: a LoweredGraph holding the
``_C.Graph``, the constant tensors it reads (get_attr), and the Python
callables of nodes without an ATen schema. Compiling never reads tensor data.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from mybackend.lowering.arguments import (
    MultiValue,
    UnsupportedArgument,
    convert_argument,
    ir_op_name,
    schema_ordered,
)
from mybackend.lowering.graph_tape import GraphTape, RecordingGraphBuilder
from mybackend.lowering.python_nodes import PythonNode
from mybackend.lowering.tensor_meta import output_specs, value_spec

BUILTINS: dict[Any, str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul",
    operator.floordiv: "floordiv", operator.mod: "mod", operator.truediv: "truediv",
    operator.pow: "pow", operator.neg: "neg", operator.eq: "eq", operator.ne: "ne",
    operator.lt: "lt", operator.le: "le", operator.gt: "gt", operator.ge: "ge",
    operator.not_: "not", operator.and_: "and", operator.or_: "or",
    torch.sym_max: "max", torch.sym_min: "min", torch.sym_not: "not",
    torch.sym_float: "float", torch.sym_int: "int", math.ceil: "ceil", math.floor: "floor",
    torch._sym_sqrt: "sqrt",  # type: ignore[attr-defined]
}  # fmt: skip


@dataclasses.dataclass
class LoweredGraph:
    """What the lowering hands to the core, and what calls need beside it."""

    graph: Any  # _C.Graph
    constants: list[torch.Tensor]  # appended to every call's inputs
    python_nodes: dict[int, PythonNode]  # IR node id -> its Python callable
    # The builder calls that made `graph` (Note [Graph tapes]): warm start
    # keeps them to build the graph again in another process.
    tape: GraphTape | None = None

    def run_python_node(self, node_id: int, inputs: list[Any]) -> list[Any]:
        return self.python_nodes[node_id](inputs)


def lower(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> LoweredGraph:
    """Builds the IR of ``gm``; raises LoweringError when it cannot."""
    return _Lowerer(gm, example_inputs).run()


class LoweringError(Exception):
    """The graph cannot be expressed in the IR (names the node)."""


def source_line(node: torch.fx.Node) -> str:
    """The user's source line dynamo recorded for a node: 'file:line: code'."""
    return _trace_source_line(node.meta.get("stack_trace") or "")


def _trace_source_line(trace: str) -> str:
    lines = [line.strip() for line in trace.strip().splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith('File "'):
            location = lines[i].split('"')
            line_no = lines[i].split("line ")[-1].split(",")[0]
            code = lines[i + 1] if i + 1 < len(lines) else ""
            return f"{location[1]}:{line_no}: {code}"
    return ""


class _Lowerer:
    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.builder = RecordingGraphBuilder()  # Note [Graph tapes]
        self.env: dict[torch.fx.Node, Any] = {}  # FX node -> ("v", id), a MultiValue, or None
        self.constants: list[tuple[torch.fx.Node, torch.Tensor]] = []
        self.python_nodes: dict[int, PythonNode] = {}
        self.node_count = 0
        # Each stack trace's source line, parsed once: the nodes of one line
        # of the user's code (an op's decomposition, its gradient) share
        # the trace's text, and parsing it was a quarter of lowering.
        self.source_lines: dict[str, str] = {}

    def run(self) -> LoweredGraph:
        nodes = list(self.gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        for index, node in enumerate(placeholders):
            example = self.example_inputs[index] if index < len(self.example_inputs) else None
            self._input(node, node.meta.get("val", example))
        for node in nodes:
            if node.op == "get_attr":
                self._constant(node)
        for node in nodes:
            if node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self.builder.set_outputs([self._output(a) for a in _flat_outputs(node.args[0])])
            elif node.op not in ("placeholder", "get_attr"):
                raise LoweringError(f"node {node.name}: {node.op} nodes are not lowered")
        return LoweredGraph(
            self.builder.build(),
            [t for _, t in self.constants],
            self.python_nodes,
            self.builder.tape,
        )

    def _input(self, node: torch.fx.Node, value: Any) -> None:
        self.env[node] = ("v", self.builder.add_input(value_spec(value, node.name)))

    def _constant(self, node: torch.fx.Node) -> None:
        tensor = getattr(self.gm, str(node.target))
        if not isinstance(tensor, torch.Tensor):
            raise LoweringError(f"node {node.name}: get_attr of a {type(tensor).__name__}")
        self.constants.append((node, tensor))
        self._input(node, node.meta.get("val", tensor))

    def _call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is torch.ops.aten.alias.default and not _is_graph_output(node):
            # Note [Aliases are free]: the alias's value is its input's.
            self.env[node] = self._lookup(node.args[0])  # type: ignore[arg-type]
            return
        if target is operator.getitem and isinstance(self.env.get(node.args[0]), MultiValue):  # type: ignore[arg-type]
            self.env[node] = self.env[node.args[0]][node.args[1]]  # type: ignore[index]
            return
        val = node.meta.get("val")
        returns_nothing = isinstance(target, torch._ops.OpOverload) and not target._schema.returns
        if isinstance(target, torch._ops.OpOverload) and (val is not None or returns_nothing):
            try:
                args = [convert_argument(a, self._lookup) for a in schema_ordered(node)]
            except UnsupportedArgument:
                args = None
            if args is not None:
                self._add(node, "aten", ir_op_name(target), args, val)
                return
        if target in BUILTINS and not node.kwargs and val is not None:
            try:
                args = [convert_argument(a, self._lookup) for a in node.args]
                self._add(node, "builtin", "builtin::" + BUILTINS[target], args, val)
                return
            except UnsupportedArgument:
                pass
        self._python(node, val)

    def _add(self, node: torch.fx.Node, kind: str, op: str, args: list[Any], val: Any) -> None:
        specs = [] if val is None and kind == "aten" else output_specs(val, node.name)
        outputs = self.builder.add_node(kind, op, args, specs, node.name, self._source_line(node))
        self.node_count += 1
        refs = MultiValue(("v", i) for i in outputs)
        self.env[node] = refs if isinstance(val, list | tuple) else (refs[0] if refs else None)

    def _source_line(self, node: torch.fx.Node) -> str:
        trace = node.meta.get("stack_trace") or ""
        line = self.source_lines.get(trace)
        if line is None:
            line = self.source_lines[trace] = _trace_source_line(trace)
        return line

    def _python(self, node: torch.fx.Node, val: Any) -> None:
        python_node = PythonNode.from_fx(node)
        inputs = [self._lookup(n) for n in python_node.input_nodes]
        flat_inputs = [
            r for item in inputs for r in (item if isinstance(item, MultiValue) else [item])
        ]
        name = getattr(node.target, "__name__", str(node.target))
        self.python_nodes[self.node_count] = python_node.bind_structure(inputs)
        self._add(node, "python", f"python::{name}", flat_inputs, val)

    def _lookup(self, node: torch.fx.Node) -> Any:
        if node not in self.env:
            raise LoweringError(f"node {node.name} is used before it is lowered")
        return self.env[node]

    def _output(self, value: Any) -> Any:
        try:
            return convert_argument(value, self._lookup)
        except UnsupportedArgument as error:
            raise LoweringError(f"graph output {value!r}: {error}") from error


# Note [Aliases are free]
# aot_autograd's functional graphs keep `aten.alias` where the user's code
# made a view of the same shape (a saved tensor read twice by the backward,
# GPT-2's tanh in its GELU derivative: `alias(alias(tanh))`). An alias
# computes nothing, but as a node it is no elementwise op, so it split the
# generated kernel around it into two, the first storing the value for the
# second. Lowering maps each alias to its input's value instead; an alias
# the graph returns stays a node, since aot_autograd expects the output to
# be a new view.
def _is_graph_output(node: torch.fx.Node) -> bool:
    return any(user.op == "output" for user in node.users)


def _flat_outputs(outputs: Any) -> list[Any]:
    return list(outputs) if isinstance(outputs, list | tuple) else [outputs]


__all__ = ["LoweredGraph", "LoweringError", "lower", "source_line"]
