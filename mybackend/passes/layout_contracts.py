"""Ops get tensors in strides their kernels accept (Note [Layout contracts]).

The layout plan (layout.py) and the padding of matrix products
(matmul_padding.py) change strides in the middle of a graph, and FakeTensor
propagation then says what every op returns. It cannot say what an op's
kernel accepts: meta functions take any strides, while CUDA's
``native_group_norm`` refuses a channels-last input when it runs. The
capability registry states a contract per op (src_cpp/capability/registry.h,
Note [Layout contracts]):

- ``any``: any strides;
- ``traced``: the traced strides, which is also what an op the registry does
  not know gets. Every tensor input whose strides changed gets a copy in its
  traced layout (contiguous where the traced strides were neither contiguous
  nor channels-last: every kernel takes contiguous tensors);
- ``storage``: the op addresses its input's storage (``as_strided``), so the
  storage must be laid out as traced. A copy in the traced memory format
  gives that only when the traced tensor filled its whole storage; for any
  other input (a permuted view, a slice) the rewrite is given up
  (LayoutContractError), and the graph keeps the layout it was traced with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from mybackend import _C
from mybackend.lowering.arguments import ir_op_name
from mybackend.passes.fake_prop import Repropagation, insert_clone, same_dims

_ANY_STRIDES, _TRACED_STRIDES, _TRACED_STORAGE = "any", "traced", "storage"


class LayoutContractError(RuntimeError):
    """A storage-addressing op reads a tensor whose traced storage layout no
    copy can give back: the rewrite that changed it must be given up."""


@functools.cache
def _contracts() -> Mapping[str, str]:
    return _C.layout_contracts()


def layout_contract(node: torch.fx.Node) -> str:
    """'any', 'traced' or 'storage' (Note [Layout contracts])."""
    if node.op != "call_function":
        return _ANY_STRIDES  # placeholders and outputs: graph outputs are restored apart
    if not isinstance(node.target, torch._ops.OpOverload):
        return _TRACED_STRIDES  # a Python callable: nothing is known of what it accepts
    return _contracts().get(ir_op_name(node.target), _TRACED_STRIDES)


def _memory_format(traced: torch.Tensor) -> torch.memory_format | None:
    """The format the traced strides are dense in, or None."""
    if traced.is_contiguous():
        return torch.contiguous_format
    if traced.dim() == 4 and traced.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _fills_its_storage(traced: torch.Tensor) -> bool:
    try:
        storage_bytes = traced.untyped_storage().nbytes()
        return bool(
            traced.storage_offset() == 0 and traced.numel() * traced.element_size() == storage_bytes
        )
    except Exception:  # symbolic sizes: not provably the whole storage
        return False


def _copy_layout(now: object, traced: object, contract: str) -> torch.memory_format | None:
    """The format to copy an input into for its op's contract; None: no copy."""
    if not isinstance(now, torch.Tensor) or not isinstance(traced, torch.Tensor):
        return None
    unchanged = same_dims(now.stride(), traced.stride()) and same_dims(
        [now.storage_offset()], [traced.storage_offset()]
    )
    if unchanged:
        return None
    layout = _memory_format(traced)
    if contract == _TRACED_STORAGE:
        if layout is None or not _fills_its_storage(traced):
            raise LayoutContractError(
                f"a storage-addressing op reads a tensor of traced strides {traced.stride()} "
                "that no copy lays out as traced"
            )
        return layout
    if layout is None:  # strides no memory format names: contiguous ones will do
        return None if now.is_contiguous() else torch.contiguous_format
    return layout


def honour_layout_contracts(graph: torch.fx.Graph, traced: Mapping[torch.fx.Node, object]) -> int:
    """Gives each tensor input of a ``traced`` or ``storage`` op whose
    strides differ from ``traced`` (node -> its value before the rewrites) a
    copy in its traced layout; returns the copies made (the caller
    propagates again). Raises LayoutContractError where no copy can do."""
    copies = 0
    for node in list(graph.nodes):
        contract = layout_contract(node)
        if contract == _ANY_STRIDES:
            continue
        for source in node.all_input_nodes:
            before = traced.get(source, source.meta.get("val"))
            layout = _copy_layout(source.meta.get("val"), before, contract)
            if layout is None:
                continue
            clone = insert_clone(graph, source, node, layout)
            node.replace_input_with(source, clone)
            copies += 1
    return copies


def settle_strides(
    graph: torch.fx.Graph,
    propagation: Repropagation,
    example_inputs: Sequence[Any],
    traced: Mapping[torch.fx.Node, object],
    rounds: int,
    rewrite_more: Callable[[], int] = lambda: 0,
) -> int | None:
    """After a rewrite that changes strides mid-graph: propagates metadata
    again, round after round, putting a contiguous copy before each view the
    new strides cannot express, then letting ``rewrite_more`` rewrite what
    propagation settled (it returns how many copies it made), then, on
    settled strides, giving ops their contracted layouts (Note [Layout
    contracts]). Returns the copies made, or None when ``rounds`` rounds did
    not settle."""
    copies = 0
    for _ in range(rounds):
        view = propagation.until_view_fails(example_inputs)
        if view is not None:
            source = view.args[0]
            assert isinstance(source, torch.fx.Node)
            view.replace_input_with(
                source, insert_clone(graph, source, view, torch.contiguous_format)
            )
            copies += 1
            continue
        more = rewrite_more()
        if more == 0:
            more = honour_layout_contracts(graph, traced)
        if more == 0:
            return copies
        copies += more
    return None
