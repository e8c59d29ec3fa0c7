"""FakeTensor propagation for the graph rewrites before lowering.

The layout plan (layout.py) and the matrix-product padding
(matmul_padding.py) change strides in the middle of a graph; both then
recompute every node's ``meta["val"]`` with these helpers, put a contiguous
copy before a ``view`` that the new strides cannot express, and give graph
outputs whose strides changed their old strides back where callers need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

aten = torch.ops.aten


def insert_clone(
    graph: torch.fx.Graph, source: torch.fx.Node, before: torch.fx.Node, layout: torch.memory_format
) -> torch.fx.Node:
    with graph.inserting_before(before):
        clone = graph.call_function(aten.clone.default, (source,), {"memory_format": layout})
    clone.meta = dict(source.meta)
    return clone


def propagate_until_view_fails(
    gm: torch.fx.GraphModule, fake_inputs: Sequence[Any]
) -> torch.fx.Node | None:
    """Recomputes meta["val"]; returns the view node that failed, else None."""
    mode = detect_fake_mode(fake_inputs)
    prop = FakeTensorProp(gm, mode=mode)
    failed: list[torch.fx.Node] = []
    original_run_node = prop.run_node

    def run_node(node: torch.fx.Node) -> Any:
        try:
            return original_run_node(node)
        except Exception:
            failed.append(node)
            raise

    prop.run_node = run_node  # type: ignore[method-assign,assignment]
    try:
        prop.propagate_dont_convert_inputs(*fake_inputs)
    except Exception:
        node = failed[-1] if failed else None
        if node is not None and node.target in (aten.view.default, aten._unsafe_view.default):
            return node
        raise
    return None


def _contiguous_clone_of(value: torch.fx.Node) -> torch.fx.Node | None:
    for user in value.users:
        if user.target is aten.clone.default and user.kwargs.get("memory_format") is (
            torch.contiguous_format
        ):
            return user
    return None


def restore_output_strides(gm: torch.fx.GraphModule, original: list[Any]) -> int:
    """Returns graph outputs in their original strides; returns the copies made."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0]
    if not isinstance(values, list | tuple):
        return 0
    new_values = list(values)
    copies = 0
    for i, (value, old) in enumerate(zip(values, original, strict=True)):
        if not isinstance(value, torch.fx.Node) or not isinstance(old, torch.Tensor):
            continue
        new = value.meta.get("val")
        if not isinstance(new, torch.Tensor) or new.stride() == old.stride():
            continue
        if not old.is_contiguous():
            raise RuntimeError(f"output {i} had non-contiguous strides {old.stride()}")
        clone = _contiguous_clone_of(value)
        if clone is None:
            clone = insert_clone(gm.graph, value, output, torch.contiguous_format)
            clone.meta["val"] = old
            copies += 1
        new_values[i] = clone
    output.args = (type(values)(new_values),)
    return copies
