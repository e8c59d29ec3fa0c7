"""FX argument values -> IR arguments (see src_cpp/bindings/ir.cpp).

Scalars pass as themselves, lists as lists, and what C++ cannot tell apart
by Python type as tagged pairs: ("v", id), ("dtype", name), ("device", str),
("layout", code), ("memory_format", code). The codes are c10's enum values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from mybackend.lowering.tensor_meta import IR_DTYPES, dtype_name

LAYOUT_CODES = {torch.strided: 0, torch.sparse_coo: 1, torch.sparse_csr: 2, torch._mkldnn: 3}  # type: ignore[attr-defined]
MEMORY_FORMAT_CODES = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}


class MultiValue(tuple):  # type: ignore[type-arg]
    """The value references of a node with several outputs (getitem picks one)."""


class UnsupportedArgument(Exception):
    """An argument the IR cannot carry; the node then runs in Python."""


def convert_argument(value: Any, lookup: Callable[[torch.fx.Node], Any]) -> Any:
    """Converts one argument; ``lookup`` maps an FX node to its IR form."""
    if isinstance(value, torch.fx.Node):
        return lookup(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [convert_argument(v, lookup) for v in value]
    if isinstance(value, torch.dtype):
        if dtype_name(value) not in IR_DTYPES:
            raise UnsupportedArgument(f"dtype {value}")
        return ("dtype", dtype_name(value))
    if isinstance(value, torch.device):
        return ("device", str(value))
    if isinstance(value, torch.layout) and value in LAYOUT_CODES:
        return ("layout", LAYOUT_CODES[value])
    if isinstance(value, torch.memory_format) and value in MEMORY_FORMAT_CODES:
        return ("memory_format", MEMORY_FORMAT_CODES[value])
    raise UnsupportedArgument(f"{type(value).__name__} {value!r}")


def schema_ordered(node: torch.fx.Node) -> list[Any]:
    """The node's args and kwargs as one list in schema order, defaults filled."""
    schema = node.target._schema  # type: ignore[union-attr]
    ordered: list[Any] = []
    for index, argument in enumerate(schema.arguments):
        if index < len(node.args) and not argument.kwarg_only:
            ordered.append(node.args[index])
        elif argument.name in node.kwargs:
            ordered.append(node.kwargs[argument.name])
        elif argument.has_default_value():
            ordered.append(argument.default_value)
        else:
            raise UnsupportedArgument(f"missing argument {argument.name!r} of {schema.name}")
    return ordered


def ir_op_name(op: torch._ops.OpOverload) -> str:
    """The IR's (and the registry's) name of an overload: 'aten::add.Tensor'."""
    namespace, rest = op.name().split("::", 1)
    name, _, overload = rest.partition(".")
    return f"{namespace}::{name}.{overload or 'default'}"
