"""Rolls as concatenations (Note [Rolls as concatenations]): the
decomposition's values against torch.roll, where it declines, its gradient
through aot_autograd, and what the fusion planner makes of it on fake CUDA
tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.decompositions import CPU_TABLE, decomposition_table
from mybackend.lowering import lower
from mybackend.ops.roll import roll_as_concatenation

aten = torch.ops.aten

CASES = [
    ((2, 8, 8, 4), (-3, -3), (1, 2)),  # a shifted window and its way back
    ((2, 8, 8, 4), (3, 3), (1, 2)),
    ((5, 7), (9,), (0,)),  # more than the size
    ((5, 7), (-12,), (-1,)),
    ((4, 6, 3), (1, 2, -1), (0, 1, 2)),  # every dim
    ((4, 6), (2, 3), (1, 1)),  # one dim twice: the shifts add
    ((4, 6), (6,), (1,)),  # a whole turn
    ((3, 1, 5), (4, 2), (1, 2)),  # a dim of size 1
]


@pytest.mark.parametrize("shape,shifts,dims", CASES, ids=str)
def test_values_are_torch_roll(
    shape: tuple[int, ...], shifts: tuple[int, ...], dims: tuple[int, ...]
) -> None:
    x = torch.randn(shape)
    got = roll_as_concatenation(x, shifts, dims)
    torch.testing.assert_close(got, torch.roll(x, shifts, dims), rtol=0, atol=0)
    assert got.data_ptr() != x.data_ptr()  # a new tensor, as roll's


def _traced(fn: Callable[..., torch.Tensor], *shapes: Sequence[int]) -> torch.fx.GraphModule:
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(s, device="cuda") for s in shapes]
    return make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*inputs)


def _targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_cuda_graphs_roll_by_concatenating_slices() -> None:
    """A two-dim roll is three concatenations of four slices (no gather, no
    roll); a roll of the flattened tensor stays whole."""
    gm = _traced(lambda x: torch.roll(x, (-3, -3), (1, 2)), (2, 8, 8, 4))
    targets = _targets(gm)
    assert targets.count(aten.cat.default) == 3, targets
    assert targets.count(aten.slice.Tensor) == 6, targets  # 2 of x, 2 of each half
    assert not {aten.roll.default, aten.index_select.default, aten.index.Tensor} & set(targets)
    flat = _targets(_traced(lambda x: torch.roll(x, 5), (4, 6)))
    assert aten.roll.default in flat and aten.cat.default not in flat, flat


@pytest.mark.parametrize(
    "shifts,dims",
    [((1,), (2,)), ((1,), (-3,)), ((1, 2), (0,))],
    ids=["past-end", "before", "count"],
)
def test_bad_arguments_are_left_to_aten(shifts: tuple[int, ...], dims: tuple[int, ...]) -> None:
    """A dim out of range or shifts and dims of different lengths: the op
    stays whole and ATen's own error reaches the user."""
    x = torch.randn(3, 4)
    assert roll_as_concatenation(x, shifts, dims) is NotImplemented
    with pytest.raises((IndexError, RuntimeError)):
        torch.roll(x, shifts, dims)


def test_symbolic_sizes_keep_the_roll_whole() -> None:
    fn = lambda x: torch.roll(x, 2, 1) * 2  # noqa: E731
    gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="symbolic")(
        torch.randn(3, 9)
    )
    targets = _targets(gm)
    assert aten.roll.default in targets and aten.cat.default not in targets, targets


def test_the_cpu_table_keeps_rolls_whole() -> None:
    """Note [Eager's kernels on the CPU]."""
    assert aten.roll.default not in CPU_TABLE
    assert decomposition_table()[aten.roll.default] is roll_as_concatenation


def test_gradients_through_aot_autograd_are_eager_ones() -> None:
    """The backward is roll's own formula (a roll back), decomposed the
    same way: both graphs hold concatenations and no roll."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, _: Any) -> Any:
        graphs.append(gm)
        return make_boxed_func(gm)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (torch.roll(x * w, (2, -1), (1, 2)) * w).sum()

    table = {aten.roll.default: roll_as_concatenation}
    compiled = aot_function(fn, fw_compiler=keep, bw_compiler=keep, decompositions=table)
    x = torch.randn(2, 5, 6, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    compiled(x, w).backward()
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    fn(x_ref, w_ref).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert len(graphs) == 2
    for gm in graphs:
        targets = _targets(gm)
        assert aten.cat.default in targets and aten.roll.default not in targets, gm.graph


def _kernels(fn: Callable[..., Any], *shapes: Sequence[int]) -> list[tuple[str, list[str]]]:
    gm = _traced(fn, *shapes)
    lowered = lower(gm, [])
    report = _C.compile(lowered.graph, {"generated_kernels": True}, None).report()
    nodes = report["nodes"]
    return [(k["kind"], [nodes[n]["op"] for n in k["nodes"]]) for k in report["kernels"]]


def _generated(kernels: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    return [(kind, ops) for kind, ops in kernels if kind != "aten_sequence"]


def test_a_roll_read_by_an_add_is_one_kernel() -> None:
    """A window merge's roll back and the residual add after it: one
    generated pointwise kernel, nothing else launched."""
    kernels = _generated(
        _kernels(lambda y, z: z + torch.roll(y, (3, 3), (1, 2)), *[(2, 14, 14, 8)] * 2)
    )
    assert len(kernels) == 1, kernels
    kind, ops = kernels[0]
    assert kind == "pointwise" and ops.count("aten::cat.default") == 3, kernels
    assert "aten::add.Tensor" in ops, kernels


def test_a_lone_roll_is_one_generated_kernel() -> None:
    """A shifted window's roll after a layer norm: the norm, then one
    kernel for the three concatenations (ATen's roll launches twice for two
    dims), then the window partition's copy."""

    def shifted(x: torch.Tensor) -> torch.Tensor:
        r = torch.roll(F.layer_norm(x, (8,)), (-3, -3), (1, 2))
        return r.view(2, 2, 7, 2, 7, 8).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, 8)

    kernels = _generated(_kernels(shifted, (2, 14, 14, 8)))
    assert [kind for kind, _ in kernels] == ["norm", "pointwise", "pointwise"], kernels
    assert kernels[1][1] == ["aten::cat.default"] * 3, kernels
