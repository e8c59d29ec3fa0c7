"""Which FX nodes the graph rewrites before lowering treat as elementwise."""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims


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
