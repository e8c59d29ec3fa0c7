"""Reading the torch-level calls of a dynamo graph, for the rewrites that
turn them into mybackend's ops before aot_autograd traces them."""

from __future__ import annotations

import inspect
from typing import Any

import torch.fx


def example_value(node: Any) -> Any:
    """The value dynamo recorded for a node (a FakeTensor, a SymInt), or
    None for a constant argument or a node without one."""
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def bound_arguments(node: torch.fx.Node, signature: inspect.Signature) -> dict[str, Any] | None:
    """The call's arguments by parameter name, defaults filled in; None when
    they do not bind to ``signature``."""
    try:
        bound = signature.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)
