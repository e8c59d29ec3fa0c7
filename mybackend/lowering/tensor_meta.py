"""FakeTensor and SymInt metadata -> IR value specs.

A spec is the tuple the C++ GraphBuilder reads (src_cpp/bindings/ir.cpp):
("tensor", dtype, device, sizes, strides, name), ("int", symbolic, name),
("float", name), ("bool", name) or ("opaque", name). A symbolic size is
written in the prefix form of src_cpp/ir/sym_expr.h.
"""

from __future__ import annotations

import hashlib
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod

# Must match the names in src_cpp/ir/dtype.cpp.
IR_DTYPES = frozenset(
    {
        "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
        "complex32", "complex64", "complex128", "bool", "bfloat16", "float8_e5m2",
        "float8_e4m3fn", "uint16", "uint32", "uint64",
    }
)  # fmt: skip

Spec = tuple[Any, ...]
SymSize = int | str


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def sym_size(value: int | torch.SymInt) -> SymSize:
    """An int, or the prefix form of a SymInt's expression."""
    if isinstance(value, int):
        return value
    expr = value.node.expr
    if expr.is_number:
        return int(expr)
    return _prefix(expr)


def _prefix(expr: sympy.Expr) -> str:
    if isinstance(expr, sympy.Integer):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return str(expr.name)
    operators: list[tuple[type, str]] = [
        (sympy.Add, "add"), (sympy.Mul, "mul"), (FloorDiv, "floordiv"), (Mod, "mod"),
        (PythonMod, "mod"), (Max, "max"), (Min, "min"),
    ]  # fmt: skip
    for cls, name in operators:
        if isinstance(expr, cls):
            operands: tuple[sympy.Expr, ...] = expr.args  # type: ignore[attr-defined]
            return f"({name} " + " ".join(_prefix(a) for a in operands) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 0:
        return f"(pow {_prefix(expr.base)} {int(expr.exp)})"
    # An expression the IR cannot evaluate stands for itself as an opaque
    # symbol: never bound, so never checked.
    digest = hashlib.sha1(str(expr).encode()).hexdigest()[:12]
    return f"opaque_{digest}"


def value_spec(value: Any, name: str) -> Spec:
    """The IR spec of one FX value (a node's meta['val'] or an example input)."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or dtype_name(value.dtype) not in IR_DTYPES:
            return ("opaque", name)
        return (
            "tensor",
            dtype_name(value.dtype),
            str(value.device),
            [sym_size(s) for s in value.shape],
            [sym_size(s) for s in value.stride()],
            name,
        )
    if isinstance(value, bool | torch.SymBool):
        return ("bool", name)
    if isinstance(value, int | torch.SymInt):
        symbolic = sym_size(value) if isinstance(value, torch.SymInt) else None
        return ("int", symbolic, name)
    if isinstance(value, float | torch.SymFloat):
        return ("float", name)
    return ("opaque", name)


def output_specs(value: Any, name: str) -> list[Spec]:
    """Specs of a node's outputs: one per element when it returns several."""
    if isinstance(value, list | tuple):
        return [value_spec(v, f"{name}[{i}]") for i, v in enumerate(value)]
    return [value_spec(value, name)]
