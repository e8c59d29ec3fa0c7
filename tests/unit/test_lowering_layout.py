"""Stage 3: channels-last planning of inference graphs (Note [Channels-last planning])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import mybackend
from mybackend.decompositions import decomposition_table
from mybackend.lowering.layout import plan_channels_last

aten = torch.ops.aten


class ConvBlock(torch.nn.Module):
    """conv -> BN -> ReLU -> 1x1 conv (+ residual) -> flatten: the ResNet shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pointwise = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.bn(self.conv(x)))
        z = self.pointwise(y) + y
        return z, z.flatten(1)  # NCHW flatten: needs the contiguous layout back


def _planned(
    module: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, int, Any]:
    graphs: list[tuple[torch.fx.GraphModule, torch.fx.GraphModule, int]] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        planned, copies = plan_channels_last(gm, example_inputs)
        graphs.append((gm, planned, copies))
        return planned.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=compiler, decompositions=decomposition_table()
        )

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(module, backend=backend)(x)
    gm, planned, copies = graphs[0]
    return gm, planned, copies, out


def _nodes(gm: torch.fx.GraphModule, target: Any) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is target]


def test_convolutions_read_channels_last_and_results_match() -> None:
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 10, 12)
    gm, planned, copies, out = _planned(module, x)
    assert planned is not gm
    for conv in _nodes(planned, aten.convolution.default):
        for operand in conv.args[:2]:
            assert operand.meta["val"].is_contiguous(memory_format=torch.channels_last), conv
    # The input and both weights are converted (the 1x1 weight too: its NCHW
    # strides are ambiguous, and aten would read it as NCHW); the second conv
    # reads the first one's output as it is.
    layouts = [str(n.kwargs["memory_format"]) for n in _nodes(planned, aten.clone.default)]
    assert layouts.count("torch.channels_last") == 3
    assert copies == len(layouts)
    with torch.no_grad():
        expected = module(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()  # callers see eager's strides


def test_graph_without_convolution_is_left_alone() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    gm, planned, copies, _ = _planned(module, torch.randn(2, 4))
    assert planned is gm and copies == 0


def test_channels_last_operands_need_no_copy() -> None:
    module = torch.nn.Conv2d(4, 4, 3).eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 5, 5).to(memory_format=torch.channels_last)
    gm, planned, copies, _ = _planned(module, x)
    assert copies == 0 and planned is gm


def test_backend_plans_inference_only_and_option_turns_it_off() -> None:
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 8, 8)

    def stage_names(options: dict[str, Any], grad: bool) -> list[list[str]]:
        with torch.set_grad_enabled(grad):
            xs = x.clone().requires_grad_(grad)
            report = mybackend.explain(module, xs, options=options).to_dict()
        return [[s[0] for s in g["stage_times"]] for g in report["graphs"]]

    assert all("layout" in names for names in stage_names({}, grad=False))
    assert not any("layout" in names for names in stage_names({"channels_last": False}, False))
    assert not any("layout" in names for names in stage_names({}, grad=True))


@pytest.mark.parametrize("grad", [False, True])
def test_backend_matches_eager(grad: bool) -> None:
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 9, 9)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="mybackend", options={"strict": True})
    with torch.set_grad_enabled(grad):
        for got, want in zip(compiled(x), module(x), strict=True):
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()
