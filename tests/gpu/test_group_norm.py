"""GPU-marked: GroupNorm after channels-last convolutions (issue 36).

The channels-last plan (Note [Channels-last planning] in
mybackend/passes/layout.py) makes convolution outputs channels-last, and
the ops after them read that layout. CUDA's ``native_group_norm`` refuses an
input that is not contiguous, so before the layout contracts (Note [Layout
contracts] in src_cpp/capability/registry.h) ``Conv2d(3, 64, 7, 4, 2) ->
GroupNorm(1, 64)`` compiled with backend="mybackend" failed with "Expected
X.is_contiguous(memory_format) to be true". These tests are that reproducer
and its variants: GroupNorm(1, 64) and GroupNorm(32, 64), right after the
convolution and after conv -> ReLU, fp32 and bf16, inference (under no_grad)
and training (forward and backward), modes "default" and "reduce-overhead"
(three calls: warm-up, capture, replay), and two PoolFormer blocks
(GroupNorm, an avg-pool token mixer, a 1x1-conv MLP with GELU, residuals).

Each compiles in strict mode, so a failure raises instead of falling back to
eager, and is compared with eager on a copy of the same module: outputs, and
in training the input's and every parameter's gradient. The layout the plan
chose is checked too, so that no test passes by planning nothing: every
convolution of the planned graphs writes channels-last and ran as a cuDNN
group (test_conv.py's helpers), and every group norm reads contiguous tensors.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from mybackend.reports import GraphRecord
from tests.gpu.test_conv import _assert_all_ran, _cudnn_tf32
from tests.gpu.test_fused_reductions import _check
from tests.testing import compiled_records, error_ratio_check

pytestmark = pytest.mark.gpu

aten = torch.ops.aten
DEVICE = "cuda"
INPUT_SHAPE = (2, 3, 64, 64)  # the stem below makes it [2, 64, 16, 16]
CALLS = 3  # reduce-overhead: the first call warms up, the second captures, the third replays
GROUP_NORMS = (aten.native_group_norm.default, aten.native_group_norm_backward.default)
GROUP_NORM_STATS = torch.ops.mybackend.group_norm_stats.default

# name -> (dtype, output tolerance, gradient tolerance). bf16 results are
# judged against an fp32 copy of the module: within 3x eager's own error
# (error_ratio_check). Gradients that are sums which nearly cancel (a group
# norm's bias before ``pool(y) - y``) hold mostly rounding noise, and the
# PoolFormer's outputs differ from eager's by one bf16 step in 2 of 32768
# elements (H200, 2026-11-27): elementwise tolerances fail on both.
PRECISIONS: dict[str, tuple[torch.dtype, dict[str, float], dict[str, float]]] = {
    "fp32": (torch.float32, {"rtol": 1e-4, "atol": 1e-4}, {"rtol": 1e-3, "atol": 1e-3}),
    "bf16": (torch.bfloat16, {"eager_error_ratio": 3.0}, {"eager_error_ratio": 3.0}),
}
MODES = ("default", "reduce-overhead")

Precision = tuple[torch.dtype, dict[str, float], dict[str, float]]


@pytest.fixture(params=list(PRECISIONS))
def precision(request: pytest.FixtureRequest) -> Iterator[Precision]:
    dtype, out_tol, grad_tol = PRECISIONS[request.param]
    # fp32 convolutions in TF32 differ by algorithm (eager's NCHW, the plan's
    # NHWC): compare exact fp32 math, as test_conv.py does.
    with _cudnn_tf32(dtype is not torch.float32):
        yield dtype, out_tol, grad_tol


def _stem() -> nn.Conv2d:
    return nn.Conv2d(3, 64, 7, 4, 2)  # the reproducer's convolution


def conv_group_norm(groups: int, relu: bool) -> nn.Module:
    """The reproducer: conv -> GroupNorm, or conv -> ReLU -> GroupNorm."""
    return nn.Sequential(_stem(), *([nn.ReLU()] if relu else []), nn.GroupNorm(groups, 64))


class PoolFormerBlock(nn.Module):
    """PoolFormer's block: x + (pool(y) - y) with y = GroupNorm(x), then
    x + MLP(GroupNorm(x)), the MLP two 1x1 convolutions around a GELU."""

    def __init__(self, dim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, dim)
        self.pool = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.norm2 = nn.GroupNorm(groups, dim)
        self.fc1 = nn.Conv2d(dim, 4 * dim, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(4 * dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + (self.pool(y) - y)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


def pool_former(groups: int) -> nn.Module:
    """The stem and two blocks: five convolutions, four group norms."""
    return nn.Sequential(_stem(), PoolFormerBlock(64, groups), PoolFormerBlock(64, groups))


def _build(factory: Callable[[], nn.Module], dtype: torch.dtype) -> nn.Module:
    """The module on the GPU in `dtype`, with group norms' affine parameters
    away from their 1/0 start, so that their gradients are not trivial."""
    torch.manual_seed(0)
    module = factory().to(DEVICE, dtype)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    return module


def _step(
    module: nn.Module, x: torch.Tensor, grad: torch.Tensor | None, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The output under no_grad (no ``grad``), or one forward and backward
    from fresh gradients: the output, the input's gradient and every
    parameter's, by name. Inputs are cast to `dtype` (the fp32 reference's)."""
    x = x.to(dtype)
    if grad is None:
        with torch.no_grad():
            return {"output": module(x)}
    grad = grad.to(dtype)
    module.zero_grad(set_to_none=True)
    xi = x.detach().clone().requires_grad_()
    y = module(xi)
    y.backward(grad)
    results = {"output": y.detach(), "input.grad": xi.grad}
    named = getattr(module, "_orig_mod", module).named_parameters()  # the same names
    results.update({f"{name}.grad": p.grad for name, p in named})
    return results


def _compare(
    got: dict[str, torch.Tensor],
    want: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor] | None,
    precision: Precision,
) -> None:
    """`got` (compiled) against `want` (eager); bf16 gradients against the
    fp32 `reference` too."""
    _, out_tol, grad_tol = precision
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        assert g is not None and w is not None, name
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape)
        tol = out_tol if name == "output" else grad_tol
        if "eager_error_ratio" in tol:
            assert reference is not None
            try:
                error_ratio_check(g, lambda n=name: reference[n], w, tol["eager_error_ratio"])
            except AssertionError as error:
                raise AssertionError(f"{name}: (ours, eager's) errors {error}") from error
        else:
            torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"{n}: {m}")
    # Callers get eager's strides back (Note [Channels-last planning]).
    assert got["output"].stride() == want["output"].stride()


def _assert_conv_groups_ran(records: list[GraphRecord], kind: str, groups: int) -> None:
    """Every convolution of the `kind` graph ran as a cuDNN group."""
    _assert_all_ran(records, kind, groups)


def _assert_replayed(records: list[GraphRecord]) -> None:
    """Each graph replayed as a CUDA graph (Note [CUDA-graph rules])."""
    for record in records:
        stats = record.compiled.stats()
        assert stats["cuda_graph_replays"] > 0, (record.name, stats)


def _assert_planned_layouts(records: list[GraphRecord], training: bool, convs: int) -> None:
    """The plan kept what it is for: each planned graph's convolutions write
    channels-last and ran as cuDNN groups. Each group norm became the
    generated statistics kernel, which reads the channels-last output as it
    is (Note [Group-norm statistics], in every mode: Note [Group-norm
    statistics in every mode]); one left whole is ATen's, given contiguous
    tensors."""
    kinds = ("forward", "backward") if training else ("inference",)
    assert sorted(r.kind for r in records) == sorted(kinds), [r.name for r in records]
    norms = 0
    for record in records:
        assert record.fallback_reason is None, record.fallback_reason
        graph = record.gm.graph
        for node in graph.find_nodes(op="call_function", target=aten.convolution.default):
            out = node.meta["val"]
            assert out.is_contiguous(memory_format=torch.channels_last), (record.name, node)
        for target in GROUP_NORMS:
            for node in graph.find_nodes(op="call_function", target=target):
                norms += 1
                for source in node.all_input_nodes:
                    value = source.meta["val"]
                    if isinstance(value, torch.Tensor) and value.dim() == 4:
                        assert value.is_contiguous(), (record.name, node, source, value.stride())
        stats = graph.find_nodes(op="call_function", target=GROUP_NORM_STATS)
        norms += len(stats)
        ran = [k for k in record.core_report["kernels"] if "group_norm_stats" in k.get("spec", "")]
        assert len(ran) == len(stats), record.core_report["kernels"]
    assert norms > 0, "no group norm reached the planned graphs"
    _assert_conv_groups_ran(records, kinds[0], convs)
    if training:
        _assert_conv_groups_ran(records, "backward", convs)


def _check_against_eager(
    factory: Callable[[], nn.Module], training: bool, mode: str, precision: Precision, convs: int
) -> None:
    """Compiles a copy of the module and runs it CALLS times beside eager,
    each call on new values; checks the planned graphs after the first (the
    run counters count every call, and replays count no groups)."""
    dtype = precision[0]
    eager = _build(factory, dtype).train(training)
    model = copy.deepcopy(eager)
    reference = copy.deepcopy(eager).float() if dtype is not torch.float32 else None
    # A lone convolution between group norms would not pay for its copies
    # (Note [Layout regions pay for their copies]): these tests are of the
    # plan, so it plans every convolution, and of the cuDNN groups, so the
    # group floor does not hand one back to ATen.
    options = {
        "strict": True,
        "cuda_graphs": mode == "reduce-overhead",
        "channels_last_everywhere": True,
        "eager_floor": False,
    }
    compiled = torch.compile(model, backend="mybackend", options=options)
    records: list[GraphRecord] = []
    for call in range(CALLS):
        x = torch.randn(INPUT_SHAPE, device=DEVICE).to(dtype)
        grad = torch.randn(2, 64, 16, 16, device=DEVICE).to(dtype) if training else None
        want = _step(eager, x, grad, dtype)
        got, new = compiled_records(lambda x=x, grad=grad: _step(compiled, x, grad, dtype))
        records += new
        expected = _step(reference, x, grad, torch.float32) if reference is not None else None
        _compare(got, want, expected, precision)
        if call == 0:
            _assert_planned_layouts(records, training, convs)
    if mode == "reduce-overhead":
        _assert_replayed(records)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("relu", [False, True], ids=["conv", "conv_relu"])
@pytest.mark.parametrize("groups", [1, 32], ids=["groups1", "groups32"])
def test_group_norm_after_a_convolution_matches_eager(
    groups: int, relu: bool, training: bool, mode: str, precision: Precision
) -> None:
    _check_against_eager(lambda: conv_group_norm(groups, relu), training, mode, precision, 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("groups", [1, 32], ids=["groups1", "groups32"])
def test_pool_former_blocks_match_eager(
    groups: int, training: bool, mode: str, precision: Precision
) -> None:
    _check_against_eager(lambda: pool_former(groups), training, mode, precision, 5)


def test_issue_36_reproducer() -> None:
    """The report's own lines: the default mode, no options but strict."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 7, 4, 2), nn.GroupNorm(1, 64)).cuda()
    options = {"strict": True, "channels_last_everywhere": True}
    compiled = torch.compile(copy.deepcopy(model), backend="mybackend", options=options)
    x = torch.randn(INPUT_SHAPE, device="cuda")
    with torch.no_grad(), _cudnn_tf32(False):
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def unet_blocks() -> nn.Module:
    """Two conv -> GroupNorm -> SiLU blocks, a UNet's."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.GroupNorm(8, 32),
        nn.SiLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.GroupNorm(8, 32),
        nn.SiLU(),
    )


@pytest.mark.parametrize("mode", MODES)
def test_unet_blocks_plan_channels_last_in_both_modes(mode: str, precision: Precision) -> None:
    """Default options. The group norms are the generated statistics kernel
    in both modes (Note [Group-norm statistics in every mode]), which reads
    channels-last, so the layout plan pays no copies around them and keeps
    both convolutions channels-last (Note [Group-norm statistics], Note
    [Layout regions pay for their copies]). The results match eager."""
    dtype = precision[0]
    cuda_graphs = mode == "reduce-overhead"
    eager = _build(unet_blocks, dtype).eval()
    reference = copy.deepcopy(eager).float() if dtype is not torch.float32 else None
    options = {"strict": True, "cuda_graphs": cuda_graphs}
    compiled = torch.compile(copy.deepcopy(eager), backend="mybackend", options=options)
    for _ in range(CALLS):
        x = torch.randn(INPUT_SHAPE, device=DEVICE).to(dtype)
        want = _step(eager, x, None, dtype)
        got, records = compiled_records(lambda x=x: _step(compiled, x, None, dtype))
        expected = _step(reference, x, None, torch.float32) if reference is not None else None
        _compare(got, want, expected, precision)
        for record in records:
            assert record.fallback_reason is None, record.fallback_reason
            graph = record.gm.graph
            convs = graph.find_nodes(op="call_function", target=aten.convolution.default)
            assert len(convs) == 2, graph
            for node in convs:
                assert node.meta["val"].is_contiguous(memory_format=torch.channels_last), node
            stats = graph.find_nodes(op="call_function", target=GROUP_NORM_STATS)
            assert len(stats) == 2, graph


# (shape, groups): a UNet's first block at batch 1 (few samples, many
# chunks), odd spatial sizes, channels per group that are and are not a
# multiple of the vector width (20 / 5 = 4: the contiguous run 4 * 143 has
# no 8-wide columns, so bf16 reads it one element at a time), one group
# (LayerNorm over [C, H, W]), 3-d and 5-d inputs.
GROUP_NORM_CASES = [
    ((1, 64, 64, 64), 32),
    ((2, 32, 7, 9), 8),
    ((3, 48, 5, 5), 6),
    ((2, 20, 11, 13), 5),
    ((2, 16, 40, 40), 1),
    ((4, 64, 100), 16),
    ((2, 32, 4, 6, 5), 4),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", GROUP_NORM_CASES, ids=str)
def test_group_norm_statistics_kernel_matches_eager(
    case: tuple[tuple[int, ...], int], layout: str, dtype: torch.dtype
) -> None:
    """Note [Group-norm units]: the generated statistics in either layout,
    the normalization and SiLU after them, and the saved [N, G] statistics,
    against eager's group norm."""
    shape, groups = case
    if layout == "channels_last" and len(shape) != 4:
        pytest.skip("channels-last is a 4-d format")
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 2 + 1
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.rand(shape[1], device=DEVICE, dtype=dtype) + 0.5
    b = torch.randn(shape[1], device=DEVICE, dtype=dtype)
    spatial = x.numel() // (shape[0] * shape[1])

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        y, mean, rstd = aten.native_group_norm(x, w, b, shape[0], shape[1], spatial, groups, 1e-5)
        return torch.nn.functional.silu(y), mean, rstd

    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype is torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    # Eager's CUDA group norm reads NCHW only: its reference reads x so.
    compiled = _check(
        fn, x, w, b, kind="norm", tol=tol, reference=lambda x, w, b: fn(x.contiguous(), w, b)
    )
    (norm,) = [k for k in compiled.report()["kernels"] if k["kind"] == "norm"]
    assert "group_norm_stats" in norm["spec"], norm
