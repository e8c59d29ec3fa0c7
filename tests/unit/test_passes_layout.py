"""Stage 3: channels-last planning of inference graphs and of training's joint
graphs (Note [Channels-last planning])."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import mybackend
import mybackend.ops.batch_norm as batch_norm
from mybackend.decompositions import decomposition_table
from mybackend.passes import pipeline
from mybackend.passes.layout import plan_channels_last
from mybackend.reports import collecting

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


Compiler = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def _run_inference(module: torch.nn.Module, x: torch.Tensor, compiler: Compiler) -> Any:
    """module(x) under no_grad, its ATen inference graph compiled by `compiler`."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=compiler, decompositions=decomposition_table()
        )

    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(module, backend=backend)(x)


def _planned(
    module: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, int, Any]:
    graphs: list[tuple[torch.fx.GraphModule, torch.fx.GraphModule, int]] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        planned, copies = plan_channels_last(gm, example_inputs, ("cpu",))
        graphs.append((gm, planned, copies))
        return planned.forward

    out = _run_inference(module, x, compiler)
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
    # The input and the 3x3 weight are converted; the 1x1 weight lists its
    # elements in channels-last order already (Note [Size-one strides]) and
    # is read as it is, as the second conv reads the first one's output.
    layouts = [str(n.kwargs["memory_format"]) for n in _nodes(planned, aten.clone.default)]
    assert layouts.count("torch.channels_last") == 2
    one_by_one = [
        c for c in _nodes(planned, aten.convolution.default) if c.args[1].op == "placeholder"
    ]
    assert len(one_by_one) == 1 and one_by_one[0].args[1].meta["val"].shape[2:] == (1, 1)
    assert copies == len(layouts)
    with torch.no_grad():
        expected = module(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()  # callers see eager's strides


def test_autocast_converts_the_casts_and_not_the_activations_between_convolutions() -> None:
    """Under autocast every convolution reads a bf16 cast, so no operand is a
    graph input and one round converts the casts and the ReLU output between
    the convolutions together; propagation makes the ReLU output
    channels-last by itself, and its copy is dropped."""
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 10, 12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, planned, copies, out = _planned(module, x)
    clones = [
        n
        for n in _nodes(planned, aten.clone.default)
        if n.kwargs["memory_format"] == torch.channels_last
    ]
    # The input's and the 3x3 weight's casts; the 1x1 weight's cast is
    # channels-last in memory already (Note [Size-one strides]).
    assert [c.args[0].target for c in clones] == [aten._to_copy.default] * 2, clones
    assert copies == len(_nodes(planned, aten.clone.default))
    for conv in _nodes(planned, aten.convolution.default):
        assert conv.args[0].meta["val"].is_contiguous(memory_format=torch.channels_last), conv
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = module(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_graph_without_convolution_is_left_alone() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    gm, planned, copies, _ = _planned(module, torch.randn(2, 4))
    assert planned is gm and copies == 0


def test_channels_last_operands_need_no_copy() -> None:
    module = torch.nn.Conv2d(4, 4, 3).eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 5, 5).to(memory_format=torch.channels_last)
    gm, planned, copies, _ = _planned(module, x)
    assert copies == 0 and planned is gm


@pytest.fixture
def plans_cpu_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend plans CUDA convolutions only; these tests plan CPU ones."""
    monkeypatch.setattr(
        pipeline,
        "plan_channels_last",
        functools.partial(plan_channels_last, device_types=("cpu",)),
    )


def test_backend_plans_inference_graphs_as_they_arrive(plans_cpu_graphs: None) -> None:
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 8, 8)

    def stage_names(options: dict[str, Any], grad: bool) -> list[list[str]]:
        with torch.set_grad_enabled(grad):
            xs = x.clone().requires_grad_(grad)
            report = mybackend.explain(module, xs, options=options).to_dict()
        return [[s[0] for s in g["stage_times"]] for g in report["graphs"]]

    assert all("layout" in names for names in stage_names({}, grad=False))
    assert not any("layout" in names for names in stage_names({"channels_last": False}, False))
    # Training graphs arrive planned (by the partition function), so their
    # compile has no layout stage of its own.
    assert not any("layout" in names for names in stage_names({}, grad=True))


def _channels_last_4d(gm: torch.fx.GraphModule) -> list[bool]:
    """Per saved 4-D activation (a backward input that is neither a
    parameter nor a gradient): is it channels-last?"""
    values = [
        n.meta.get("val")
        for n in gm.graph.find_nodes(op="placeholder")
        if not n.name.startswith(("primals", "tangents"))
    ]
    return [
        v.is_contiguous(memory_format=torch.channels_last) and not v.is_contiguous()
        for v in values
        # 1x1 images (a 1x1 convolution's saved weight copy) are both layouts.
        if isinstance(v, torch.Tensor)
        and v.dim() == 4
        and v.shape[1] > 1
        and v.shape[2:].numel() > 1
    ]


def test_the_backend_leaves_cpu_convolutions_in_eagers_layout() -> None:
    """On the CPU mybackend runs ATen's kernels: channels-last oneDNN
    convolutions would round differently from eager's for no gain."""
    torch._dynamo.reset()
    with collecting() as records, torch.no_grad():
        torch.compile(ConvBlock().eval(), backend="mybackend")(torch.randn(2, 3, 8, 8))
    (record,) = records
    assert not any(
        n.target is aten.clone.default and n.kwargs.get("memory_format") is torch.channels_last
        for n in record.gm.graph.nodes
    )


@pytest.mark.parametrize("channels_last", [True, False])
def test_training_is_planned_on_the_joint_graph(
    channels_last: bool, plans_cpu_graphs: None
) -> None:
    """Forward and backward agree on every saved tensor's layout: the
    backward's saved activations arrive channels-last; outputs, gradients
    and batch-norm buffers keep eager's values and strides."""
    torch.manual_seed(0)
    module, reference = ConvBlock().train(), ConvBlock().train()
    reference.load_state_dict(module.state_dict())
    x = torch.randn(2, 3, 8, 8)
    torch._dynamo.reset()
    options = {"strict": True, "channels_last": channels_last}
    with collecting() as records:
        compiled = torch.compile(module, backend="mybackend", options=options)
        outs = compiled(x)
        sum(o.square().sum() for o in outs).backward()
    want = reference(x)
    sum(o.square().sum() for o in want).backward()
    for got, expected in zip(outs, want, strict=True):
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()
    for (name, p), q in zip(module.named_parameters(), reference.parameters(), strict=True):
        # Channels-last convolution gradients sum in another order.
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
        assert p.grad.stride() == q.grad.stride(), (name, p.grad.stride(), q.grad.stride())
    torch.testing.assert_close(module.bn.running_var, reference.bn.running_var)
    (backward,) = [r.gm for r in records if r.kind == "backward"]
    saved = _channels_last_4d(backward)
    assert saved and all(saved) if channels_last else not any(saved), saved
    # The convolution backward reads the forward's channels-last input and
    # weight copies: the library call has nothing to convert.
    operands = [
        n.args[i].meta["val"]
        for n in backward.graph.find_nodes(
            op="call_function", target=aten.convolution_backward.default
        )
        for i in (1, 2)  # (the output's gradient arrives in the output's NCHW strides)
    ]
    spatial = [v for v in operands if v.shape[2] * v.shape[3] > 1]
    assert spatial
    assert all(
        v.is_contiguous(memory_format=torch.channels_last) == channels_last for v in spatial
    ), [(tuple(v.shape), v.stride()) for v in spatial]


@pytest.mark.parametrize("grad", [False, True])
def test_backend_matches_eager(grad: bool, plans_cpu_graphs: None) -> None:
    module = ConvBlock().eval()
    x = torch.randn(2, 3, 9, 9)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="mybackend", options={"strict": True})
    with torch.set_grad_enabled(grad):
        for got, want in zip(compiled(x), module(x), strict=True):
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()


@pytest.mark.parametrize("recompile", [True, False])
def test_recompile_false_leaves_the_final_code_generation_to_the_caller(
    recompile: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Note [One recompile per joint graph]: the copy's constructor generates
    code once; the pass's own recompile at its end is skipped on request."""
    captured: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        captured.append((gm, example_inputs))
        return gm.forward

    _run_inference(ConvBlock(), torch.randn(2, 3, 8, 8), compiler)
    gm, example_inputs = captured[0]
    calls = []
    original = torch.fx.GraphModule.recompile

    def counting(self: torch.fx.GraphModule) -> Any:
        calls.append(self)
        return original(self)

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counting)
    planned, copies = plan_channels_last(gm, example_inputs, ("cpu",), recompile=recompile)
    assert copies > 0 and planned is not gm
    assert len([c for c in calls if c is planned]) == (2 if recompile else 1)
    monkeypatch.undo()
    planned.recompile()  # what the caller does before running it
    gen = torch.Generator().manual_seed(0)
    real = [torch.rand(e.shape, generator=gen) + 0.5 for e in example_inputs]
    torch.testing.assert_close(planned(*real), gm(*real))


class GroupNormBlocks(torch.nn.Module):
    """A UNet's blocks: conv -> GroupNorm -> SiLU, twice. ATen's group norm
    reads NCHW only (Note [Layout contracts]), so where a graph keeps it
    whole (a CPU graph here) every convolution would sit between a copy into
    channels-last and a copy back; on CUDA the decomposition table rewrites
    it (Note [Group-norm statistics])."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.GroupNorm(2, 8),
            torch.nn.SiLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.GroupNorm(2, 8),
            torch.nn.SiLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)  # type: ignore[no-any-return]


class ChainThenGroupNormBlock(torch.nn.Module):
    """A ConvBlock chain (the layout flows through its convolutions), then a
    conv -> GroupNorm block on its output."""

    def __init__(self) -> None:
        super().__init__()
        self.chain = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.ReLU(),
        )
        self.norm = torch.nn.GroupNorm(2, 8)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.norm2 = torch.nn.GroupNorm(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.conv(torch.nn.functional.silu(self.norm(self.chain(x)))))


def _conv_layouts(planned: torch.fx.GraphModule) -> list[bool]:
    """Per convolution in graph order: does it read channels-last?"""
    return [
        conv.args[0].meta["val"].is_contiguous(memory_format=torch.channels_last)
        for conv in _nodes(planned, aten.convolution.default)
    ]


def test_convolutions_between_nchw_only_ops_keep_the_traced_layout() -> None:
    """Note [Layout regions pay for their copies]: each convolution's region
    would copy its input in and its output back, all of its bytes."""
    module = GroupNormBlocks().eval()
    x = torch.randn(2, 3, 16, 16)
    gm, planned, copies, out = _planned(module, x)
    assert planned is gm and copies == 0
    with torch.no_grad():
        torch.testing.assert_close(out, module(x))


def test_a_chain_keeps_its_plan_beside_a_convolution_that_loses() -> None:
    """The chain's region pays (one copy in for three convolutions), the
    convolution between two group norms does not: the plan is redone without
    it, and only it reads NCHW."""
    module = ChainThenGroupNormBlock().eval()
    x = torch.randn(2, 3, 16, 16)
    gm, planned, copies, out = _planned(module, x)
    assert planned is not gm and copies > 0
    assert _conv_layouts(planned) == [True, True, True, False]
    with torch.no_grad():
        torch.testing.assert_close(out, module(x))


def test_group_norms_rewritten_for_cuda_leave_the_blocks_channels_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Note [Group-norm statistics]: the rewritten group norm reads any
    layout, so its blocks pay no copies and stay in the plan."""
    monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu", "cuda"))
    module = GroupNormBlocks().eval()
    x = torch.randn(2, 3, 16, 16)
    gm, planned, copies, out = _planned(module, x)
    assert planned is not gm and copies > 0
    assert _conv_layouts(planned) == [True, True]
    assert torch.ops.mybackend.group_norm_stats.default in {n.target for n in planned.graph.nodes}
    with torch.no_grad():
        torch.testing.assert_close(out, module(x))
