"""Nodes without an ATen schema, run by calling back into Python.

The C++ runtime hands such a node its input values as one flat list (a
multi-output input contributes all its values). PythonNode rebuilds the
original args/kwargs from that list, calls the target, and flattens the
result again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.fx

from mybackend.lowering.arguments import MultiValue


@dataclasses.dataclass
class PythonNode:
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    input_nodes: list[torch.fx.Node]
    widths: list[int] = dataclasses.field(default_factory=list)  # values per input node

    @classmethod
    def from_fx(cls, node: torch.fx.Node) -> PythonNode:
        inputs: list[torch.fx.Node] = []

        def record(input_node: torch.fx.Node) -> torch.fx.Node:
            inputs.append(input_node)
            return input_node

        torch.fx.node.map_arg((node.args, node.kwargs), record)
        return cls(node.target, node.args, dict(node.kwargs), inputs)

    def bind_structure(self, lowered_inputs: list[Any]) -> PythonNode:
        """Records how many flat values each input node contributes."""
        self.widths = [len(v) if isinstance(v, MultiValue) else 1 for v in lowered_inputs]
        return self

    def __call__(self, flat_values: list[Any]) -> list[Any]:
        values: list[Any] = []
        position = 0
        for width, node in zip(self.widths, self.input_nodes, strict=True):
            is_tuple = width != 1 or isinstance(node.meta.get("val"), tuple | list)
            chunk = flat_values[position : position + width]
            values.append(tuple(chunk) if is_tuple else chunk[0])
            position += width
        replacements = iter(values)
        args, kwargs = torch.fx.node.map_arg((self.args, self.kwargs), lambda _: next(replacements))
        result = self.target(*args, **kwargs)
        return list(result) if isinstance(result, tuple | list) else [result]
