"""Which FX nodes the graph rewrites before lowering treat as elementwise,
and as shape views."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims

# The ops that only reshape their input (a view, never a copy, of a
# tensor whose strides allow it).
SHAPE_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def has_static_layout(value: Any) -> bool:
    """A FakeTensor whose sizes and strides are all plain ints."""
    return isinstance(value, torch.Tensor) and all(
        type(s) is int for s in (*value.shape, *value.stride())
    )


def is_static_contiguous(value: Any) -> bool:
    """A contiguous FakeTensor of static sizes and strides."""
    return has_static_layout(value) and value.is_contiguous()


def is_pointwise(node: torch.fx.Node) -> bool:
    """An ATen operator tagged pointwise (``torch.Tag.pointwise``)."""
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and torch.Tag.pointwise in target.tags
    )


def is_dtype_cast(node: torch.fx.Node) -> bool:
    """``aten._to_copy`` changing only the dtype, or
    ``prims.convert_element_type``: elementwise, though not tagged so.
    Autocast's backward writes its casts with ``layout=torch.strided`` and
    the tensor's own device, which change nothing."""
    if node.op != "call_function":
        return False
    if node.target is aten._to_copy.default:
        if len(node.args) != 1 or "dtype" not in node.kwargs:
            return False
        if not set(node.kwargs) <= {"dtype", "layout", "device"}:
            return False
        if node.kwargs.get("layout", torch.strided) != torch.strided:
            return False
        source = node.args[0]
        device = node.kwargs.get("device")
        if device is None:
            return True
        value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        return isinstance(value, torch.Tensor) and value.device == torch.device(device)
    return node.target is prims.convert_element_type.default


def is_elementwise(node: torch.fx.Node) -> bool:
    return is_pointwise(node) or is_dtype_cast(node)
