"""Stage 3: the layout plan honours each op's layout contract (Note [Layout
contracts] in src_cpp/capability/registry.h and layout_contracts.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import mybackend
from mybackend import _C
from mybackend.decompositions import decomposition_table
from mybackend.passes.layout import plan_channels_last
from mybackend.passes.layout_contracts import ir_op_name, layout_contract

aten = torch.ops.aten


class ConvGroupNorm(torch.nn.Module):
    """conv -> GroupNorm -> conv: CUDA's group norm refuses channels-last."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.norm = torch.nn.GroupNorm(groups, 16)
        self.out = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.conv(x))))


class ConvAsStrided(torch.nn.Module):
    """as_strided addresses storage: on channels-last strides it reads other
    elements. Of a permuted view, no copy gives the traced storage back."""

    def __init__(self, permuted: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.permuted = permuted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.permuted:
            y = y.permute(0, 2, 3, 1)
        return y.as_strided((2, 4, 3, 3), (4 * 6 * 6, 36, 6, 1)) * 2


def _planned(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.fx.GraphModule, Any]:
    planned_graphs: list[torch.fx.GraphModule] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        # A convolution beside NCHW-only ops may not pay for its copies
        # (Note [Layout regions pay for their copies]); these tests are of
        # the contracts, so every convolution is planned.
        planned, _ = plan_channels_last(gm, example_inputs, ("cpu",), every_region=True)
        planned_graphs.append(planned)
        return planned.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=compiler, decompositions=decomposition_table()
        )

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(module, backend=backend)(x)
    return planned_graphs[0], out


def _inputs_of(gm: torch.fx.GraphModule, target: Any) -> list[torch.Tensor]:
    node = next(n for n in gm.graph.nodes if n.target is target)
    return [a.meta["val"] for a in node.all_input_nodes if isinstance(a.meta["val"], torch.Tensor)]


def test_registry_states_the_contracts_the_plan_relies_on() -> None:
    contracts = _C.layout_contracts()
    assert contracts["aten::native_group_norm.default"] == "traced"
    assert contracts["aten::native_group_norm_backward.default"] == "traced"
    assert contracts["aten::as_strided.default"] == "storage"
    assert contracts["aten::convolution.default"] == "any"
    assert contracts["aten::relu.default"] == "any"
    assert contracts["aten::upsample_nearest2d.vec"] == "any"  # claimed or not
    assert "aten::not_an_op.default" not in contracts
    claimed = {op for op, _ in mybackend.supported_ops()}
    assert claimed <= contracts.keys()  # every claimed op states one


def test_unknown_ops_and_python_callables_get_their_traced_strides() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    known = graph.call_function(aten.relu.default, (x,))
    unknown = graph.call_function(aten.cummax.default, (x, 0))
    python = graph.call_function(torch.relu, (x,))
    assert ir_op_name(aten.relu.default) == "aten::relu.default"
    assert layout_contract(known) == "any"
    assert layout_contract(unknown) == "traced"
    assert layout_contract(python) == "traced"


@pytest.mark.parametrize("groups", [1, 4])
def test_group_norm_reads_its_traced_layout(groups: int) -> None:
    module = ConvGroupNorm(groups).eval()
    x = torch.randn(2, 3, 12, 12)
    planned, out = _planned(module, x)
    for conv in [n for n in planned.graph.nodes if n.target is aten.convolution.default]:
        assert conv.args[0].meta["val"].is_contiguous(memory_format=torch.channels_last)
    (norm_input, *_) = _inputs_of(planned, aten.native_group_norm.default)
    assert norm_input.is_contiguous()  # not the convolution's channels-last output
    with torch.no_grad():
        torch.testing.assert_close(out, module(x), rtol=1e-4, atol=1e-5)


def test_as_strided_reads_the_storage_it_was_traced_with() -> None:
    torch.manual_seed(0)
    module = ConvAsStrided().eval()
    x = torch.randn(2, 3, 6, 6)
    planned, out = _planned(module, x)
    (source,) = _inputs_of(planned, aten.as_strided.default)
    assert source.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(out, module(x))


def test_as_strided_of_a_permuted_view_gives_up_the_plan() -> None:
    """A copy of the view would lay out its storage in the view's order, not
    in the base's: the graph keeps its traced layout instead."""
    torch.manual_seed(0)
    module = ConvAsStrided(permuted=True).eval()
    x = torch.randn(2, 3, 6, 6)
    planned, out = _planned(module, x)
    conv = next(n for n in planned.graph.nodes if n.target is aten.convolution.default)
    assert conv.meta["val"].is_contiguous()  # not planned
    with torch.no_grad():
        torch.testing.assert_close(out, module(x))


@pytest.mark.parametrize("grad", [False, True])
def test_group_norm_block_through_mybackend_matches_eager(grad: bool) -> None:
    torch.manual_seed(0)
    module = ConvGroupNorm(4).train(grad)
    reference = ConvGroupNorm(4).train(grad)
    reference.load_state_dict(module.state_dict())
    x = torch.randn(2, 3, 12, 12)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="mybackend", options={"strict": True})
    with torch.set_grad_enabled(grad):
        out, expected = compiled(x), reference(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    if grad:
        out.sum().backward()
        expected.sum().backward()
        for a, b in zip(module.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
