"""mybackend/passes/memory_order_reductions.py: a reduction over dims that
memory holds outside the kept ones reads its input in memory order (Note
[Reductions in memory order])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from mybackend.passes.memory_order_reductions import reduce_in_memory_order

aten = torch.ops.aten
CL = torch.channels_last


def _rewritten(fn: Callable[..., torch.Tensor], x: torch.Tensor) -> tuple[Any, Any, int]:
    before = make_fx(fn, tracing_mode="fake")(x)
    gm = make_fx(fn, tracing_mode="fake")(x)
    count = reduce_in_memory_order(gm)
    gm.graph.lint()
    return before, gm, count


def _targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _image(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 8, 5, 6, dtype=dtype).contiguous(memory_format=CL)


CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean_spatial_keepdim": lambda x: x.mean((2, 3), keepdim=True),  # squeeze-excitation
    "mean_spatial": lambda x: x.mean((-1, -2)),
    "sum_spatial_fp32": lambda x: x.sum((2, 3), dtype=torch.float32),
    "amax_spatial": lambda x: x.amax((2, 3), keepdim=True),
    "mean_channels": lambda x: x.mean(1, keepdim=True),  # innermost in memory
}


@pytest.mark.parametrize("case", list(CASES))
def test_reductions_of_a_channels_last_input_read_it_in_memory_order(case: str) -> None:
    fn = CASES[case]
    x = _image(torch.bfloat16 if "fp32" in case else torch.float32)
    before, after, count = _rewritten(fn, x)
    assert count == 1
    assert aten.permute.default in _targets(after) and aten.as_strided.default in _targets(after)
    (out,) = after.graph.find_nodes(op="output")
    traced = next(n for n in before.graph.find_nodes(op="output")).args[0].meta["val"]
    assert out.args[0].meta["val"].shape == traced.shape
    assert out.args[0].meta["val"].stride() == traced.stride()  # nothing downstream changes
    want, got = fn(x), after(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.mean((2, 3), keepdim=True), torch.randn(2, 8, 5, 6)),  # already in order
        (lambda x: x.mean((1, 2)), _image()),  # C and H: not one range in memory
        (lambda x: x.mean((2, 3)), torch.randn(2, 8, 5, 6)[:, :, :, ::2]),  # not dense
        (lambda x: x.sum(), _image()),  # every dim
    ],
    ids=["contiguous", "not_a_range", "not_dense", "every_dim"],
)
def test_other_reductions_stay_as_traced(fn: Any, x: torch.Tensor) -> None:
    _, after, count = _rewritten(fn, x)
    assert count == 0
    assert aten.as_strided.default not in _targets(after)


def test_a_lone_squeeze_excitation_mean_becomes_a_generated_column_reduction() -> None:
    """On (fake) CUDA tensors the planner generates the rewritten mean (read
    by a matrix product, as in a squeeze-excitation block) as an Outer
    reduction, where the traced one ran as an ATen call."""

    def squeeze(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.mean((2, 3)) @ w

    with FakeTensorMode():
        x = torch.empty(1, 96, 28, 28, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(96, 24, dtype=torch.bfloat16, device="cuda")
        gm = make_fx(squeeze, tracing_mode="fake")(x.contiguous(memory_format=CL), w)
    assert "reduction" not in _kernel_kinds(gm)
    assert reduce_in_memory_order(gm) == 1
    assert "reduction" in _kernel_kinds(gm)


def test_a_mean_with_an_elementwise_reader_keeps_its_epilogue() -> None:
    """The sigmoid after the mean fuses into it as traced; the views of the
    rewrite would keep them apart, so the graph stays as it is."""
    _, _, count = _rewritten(lambda x: torch.sigmoid(x.mean((2, 3), keepdim=True)), _image())
    assert count == 0


def _kernel_kinds(gm: torch.fx.GraphModule) -> list[str]:
    lowered = lower(gm, [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")])
    report = _C.compile(lowered.graph, {"generated_kernels": True}, None).report()
    return [k["kind"] for k in report["kernels"]]
