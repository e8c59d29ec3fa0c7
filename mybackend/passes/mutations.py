"""Input mutations batched into multi-tensor ops.

Note [Batched input mutations]
aot_autograd keeps the mutations of graph inputs it may keep (batch norm's
running statistics and ``num_batches_tracked``, other buffers updated under
no_grad) inside the graph as an epilogue: one ``copy_(input, new_value)``
per mutated input, after everything else. Batch norm's counter adds one
more node per layer: ``new = add(num_batches_tracked, 1)``, read only by its
``copy_``. In a ResNet-50 training step that is 159 copies and 53 int64 adds,
212 ATen calls of a few bytes to a few KiB each: 212 dispatches on the host
per step and, on a GPU, 212 launches (0.28 ms of an H100's step, most of it
launch ramp and tail).

This pass replaces them with ``_foreach_copy_`` (one per device) and
``_foreach_add_.Scalar`` (one per device and added scalar), ATen's
multi-tensor kernels: a launch per few dozen tensors. What is batched:

* a ``copy_(dst, src)`` whose ``dst`` is a graph input of the same shape,
  dtype and device as ``src``, whose result nothing reads, and after which
  nothing reads ``dst``; ``src`` is computed in the graph, not an input or
  a view of one (a multi-tensor kernel copies all pairs at once, so a
  source must not share memory with another copy's target);
* of those, a copy whose ``src`` is ``add(dst, scalar)`` read by nothing
  else becomes an increment: the add goes too, ``_foreach_add_`` adds in
  place.

The multi-tensor nodes go where the last batched copy was. That keeps every
read of the old values before it (nothing reads a batched ``dst`` after its
copy) and every ``src`` defined before it; the copies write distinct inputs,
so their order never mattered. An increment's add moves later too: it reads
only ``dst``, which nothing writes in between. Fewer than two candidates of
a kind on a device are left as they are.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.fx

from mybackend.passes.fake_prop import same_dims
from mybackend.passes.hoist import view_base

aten = torch.ops.aten


def batch_input_mutations(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns the number of ``copy_`` nodes batched.
    With ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    copies: dict[str, list[torch.fx.Node]] = defaultdict(list)
    increments: dict[tuple[str, type, Any], list[torch.fx.Node]] = defaultdict(list)
    for node in graph.nodes:
        device = _batchable_copy(node, order)
        if device is None:
            continue
        scalar = _increment_of(node)
        if scalar is None:
            copies[device].append(node)
        else:
            increments[(device, type(scalar), scalar)].append(node)
    batches = [(aten._foreach_copy_.default, group, None) for group in copies.values()]
    batches += [(aten._foreach_add_.Scalar, group, key[2]) for key, group in increments.items()]
    batches = [b for b in batches if len(b[1]) >= 2]
    if not batches:
        return 0
    last = max((copy for _, group, _ in batches for copy in group), key=order.__getitem__)
    batched = 0
    with graph.inserting_after(last):
        for op, group, scalar in batches:
            targets = [copy.args[0] for copy in group]
            if scalar is None:
                args: tuple[Any, ...] = (targets, [copy.args[1] for copy in group])
            else:
                args = (targets, scalar)
            graph.call_function(op, args).meta["val"] = None
    for _, group, scalar in batches:
        for copy in group:
            source = copy.args[1]
            graph.erase_node(copy)
            if scalar is not None:
                graph.erase_node(source)
            batched += 1
    if recompile:
        gm.recompile()
    return batched


def _batchable_copy(node: torch.fx.Node, order: dict[torch.fx.Node, int]) -> str | None:
    """The device of a copy_ this pass may batch (Note [Batched input mutations])."""
    if node.target is not aten.copy_.default or node.kwargs or len(node.args) != 2:
        return None
    dst, src = node.args
    if not isinstance(dst, torch.fx.Node) or not isinstance(src, torch.fx.Node):
        return None
    if dst.op != "placeholder" or node.users:
        return None
    if any(order[user] > order[node] for user in dst.users):
        return None
    old, new = dst.meta.get("val"), src.meta.get("val")
    if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
        return None
    if not same_dims(old.shape, new.shape) or old.dtype != new.dtype or old.device != new.device:
        return None
    if view_base(src).op == "placeholder":  # may alias another batched input
        return None
    return str(old.device)


def _increment_of(copy: torch.fx.Node) -> int | float | None:
    """The scalar of ``copy_(dst, add(dst, scalar))`` when the add is read
    only by the copy; else None."""
    dst, src = copy.args
    if not isinstance(src, torch.fx.Node) or src.target is not aten.add.Tensor:
        return None
    if src.kwargs or len(src.args) != 2 or src.args[0] is not dst or len(src.users) != 1:
        return None
    scalar = src.args[1]
    if isinstance(scalar, bool) or not isinstance(scalar, int | float):
        return None
    return scalar
