"""GPU-marked: generated max-pool kernels and their backward (Note [Pool
groups]) against eager.

The pool itself is exact: values and indices must equal eager's bit for bit
(NaN where eager has NaN) in fp32, bf16 and fp16, over kernel sizes, strides,
padding, dilation, ceil_mode, odd sizes, both layouts, channel counts that
are not a multiple of the vector width, batch 1 and 32, and NaN inputs.
Every test checks the counters (generated_pools_run, no fallback) so none can
pass by running ATen's pool; the ResNet stem under torch.compile checks that
batch norm and ReLU ran inside the pool kernel, at bf16 tolerances (the
convolution differs from eager's). The backward's sums are exact too: both
sides add the windows that chose an element in the same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.decompositions import batch_norm_inference
from mybackend.lowering import lower
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, BF16, F16]
LAYOUTS = {"nhwc": torch.channels_last, "nchw": torch.contiguous_format}

# (kernel, stride, padding, dilation, ceil_mode): every combination eager accepts.
GEOMETRIES = list(itertools.product([2, 3], [1, 2], [0, 1], [1, 2], [False, True]))


def _input(shape: tuple[int, ...], dtype: torch.dtype, layout: str) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=LAYOUTS[layout])


def _pool_fn(
    geometry: tuple[int, int, int, int, bool], indices: bool
) -> Callable[[torch.Tensor], Any]:
    kernel, stride, padding, dilation, ceil_mode = geometry

    def pool(x: torch.Tensor) -> Any:
        values, index = F.max_pool2d_with_indices(
            x, kernel, stride, padding, dilation, ceil_mode=ceil_mode
        )
        return (values, index) if indices else values

    return pool


def _compile(fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    lowered = lower(make_fx(fn, tracing_mode="fake")(*inputs), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def _assert_exact(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def _check_pool(fn: Callable[[torch.Tensor], Any], x: torch.Tensor, indices: bool) -> Any:
    """Compiles fn for x, runs it, compares with eager exactly; the pool
    kernel must have run (and stored indices exactly when they are read)."""
    compiled = _compile(fn, x)
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert ("indices=1" in pool["spec"]) == indices, pool["spec"]
    got = compiled.run([x])
    expected = fn(x)
    torch.cuda.synchronize()
    if indices:
        _assert_exact(got[0], expected[0])
        _assert_exact(got[1], expected[1])
    else:
        _assert_exact(got[0], expected)
    stats = compiled.stats()
    assert stats["generated_pools_run"] == 1, (stats, pool)
    assert stats["generated_kernel_fallbacks"] == 0, (stats, compiled.report()["kernels"])
    return compiled


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_every_geometry_matches_eager_exactly(
    geometry: tuple[int, int, int, int, bool], layout: str, dtype: torch.dtype
) -> None:
    # Odd sizes; 20 channels: no whole 8-channel bf16 vectors.
    x = _input((2, 20, 9, 11), dtype, layout)
    _check_pool(_pool_fn(geometry, indices=True), x, indices=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("channels", [1, 3, 8, 64, 65])
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("indices", [False, True], ids=["values", "indices"])
def test_channels_batches_and_unread_indices(
    indices: bool, batch: int, channels: int, layout: str, dtype: torch.dtype
) -> None:
    x = _input((batch, channels, 15, 14), dtype, layout)
    _check_pool(_pool_fn((3, 2, 1, 1, False), indices), x, indices)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_nan_propagates_with_eagers_index(layout: str, dtype: torch.dtype) -> None:
    x = _input((2, 16, 12, 12), dtype, layout)
    x[torch.rand(x.shape, device="cuda") < 0.05] = float("nan")
    x[0, 0, :3, :3] = float("nan")  # a window of several NaNs: the last one's index
    for geometry in [(3, 2, 1, 1, False), (2, 1, 0, 2, True)]:
        _check_pool(_pool_fn(geometry, indices=True), x, indices=True)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ties_keep_the_first_window_element(layout: str) -> None:
    x = torch.randint(0, 3, (2, 8, 10, 10), device="cuda").to(BF16)
    x = x.contiguous(memory_format=LAYOUTS[layout])
    _check_pool(_pool_fn((3, 1, 1, 1, False), indices=True), x, indices=True)


def test_resnet_stem_pool_at_batch_32() -> None:
    x = _input((32, 64, 112, 112), BF16, "nhwc")
    _check_pool(_pool_fn((3, 2, 1, 1, False), indices=False), x, indices=False)


def test_a_call_in_another_layout_runs_aten_for_that_call() -> None:
    fn = _pool_fn((3, 2, 1, 1, False), indices=True)
    compiled = _compile(fn, _input((2, 16, 9, 9), BF16, "nhwc"))
    x = _input((2, 16, 9, 9), BF16, "nchw")
    got = compiled.run([x])
    expected = fn(x)
    _assert_exact(got[0], expected[0])
    _assert_exact(got[1], expected[1])
    stats = compiled.stats()
    assert stats["generated_kernel_fallbacks"] == 1 and stats["generated_pools_run"] == 0, stats
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert "is not dense nhwc as compiled" in pool["problem"], pool["problem"]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_batch_norm_relu_prologue_matches_eager(layout: str) -> None:
    """relu((x - mean) * rstd * weight + bias) then the pool, in one kernel: the prologue
    rounds to bf16 before comparing, as eager's pool reads bf16."""

    def bn_relu_pool(x: torch.Tensor, *stats: torch.Tensor) -> Any:
        y = batch_norm_inference(x, *stats, 0.1, 1e-5)[0]
        return F.max_pool2d(torch.relu(y), 3, 2, 1)

    x = _input((4, 64, 28, 28), BF16, layout)
    weight, bias, mean = (torch.randn(64, device="cuda", dtype=BF16) for _ in range(3))
    var = torch.rand(64, device="cuda", dtype=BF16) + 0.5
    compiled = _compile(bn_relu_pool, x, weight, bias, mean, var)
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert "with 7 prologue elementwise ops" in pool["why"], pool["why"]
    (got,) = compiled.run([x, weight, bias, mean, var])
    # The same math as eager's decomposition, rounded once where eager
    # rounds after every op (and a multiply-add may contract): within a
    # bf16 rounding of eager's, through the decomposition or batch_norm.
    for expected in (
        bn_relu_pool(x, weight, bias, mean, var),
        F.max_pool2d(F.relu(F.batch_norm(x, mean, var, weight, bias)), 3, 2, 1),
    ):
        torch.testing.assert_close(got, expected, rtol=1.6e-2, atol=1.6e-2)
    stats = compiled.stats()
    assert stats["generated_pools_run"] == 1 and stats["generated_kernel_fallbacks"] == 0, stats


class Stem(nn.Module):
    """ResNet-50's stem."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.bn(self.conv(x))))


def _stats(records: list[Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for record in records:
        if record.compiled is None:
            continue
        for key, value in record.compiled.stats().items():
            total[key] = total.get(key, 0) + value
    return total


def _pool_groups(records: list[Any]) -> list[tuple[dict[str, Any], list[str]]]:
    groups = []
    for record in records:
        if not record.core_report:
            continue
        ops = [n["op"] for n in record.core_report["nodes"]]
        for kernel in record.core_report["kernels"]:
            if kernel["kind"] == "pool":
                groups.append((kernel, [ops[n] for n in kernel["nodes"]]))
    return groups


@pytest.mark.parametrize("batch", [1, 32])
def test_compiled_inference_stem_fuses_batch_norm_and_relu_into_the_pool(batch: int) -> None:
    torch.manual_seed(0)
    stem = Stem().cuda().to(BF16).eval()
    with torch.no_grad():
        stem.bn.running_mean.normal_()
        stem.bn.running_var.uniform_(0.5, 2.0)
        stem.bn.weight.normal_()
        stem.bn.bias.normal_()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=BF16)
    compiled = torch.compile(stem, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        expected = stem(x)
    torch.testing.assert_close(got, expected, rtol=1.6e-2, atol=1.6e-2)
    groups = _pool_groups(records)
    assert len(groups) == 1, [r.core_report["kernels"] for r in records if r.core_report]
    pool, ops = groups[0]
    assert "aten::relu.default" in ops and "aten::mul.Tensor" in ops, ops
    assert "layout=nhwc" in pool["spec"] and "indices=0" in pool["spec"], pool["spec"]
    stats = _stats(records)
    assert stats["generated_pools_run"] == 1, stats
    assert stats["generated_kernel_fallbacks"] == 0, stats
    # A replay launches the generated pool and no ATen pool kernel.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            compiled(x)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any(n.startswith("mb_pool_") for n in names), names
    assert not any("max_pool" in n for n in names), names


def test_training_reads_the_indices_and_the_backward_matches_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Full fp32 convolutions on both sides, so that no window's maximum
    # moves between eager and compiled and the gradients are comparable.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    stem = Stem().cuda()
    x = torch.randn(2, 3, 64, 64, device="cuda", requires_grad=True)
    compiled = torch.compile(stem, backend="mybackend", options={"strict": True})
    grad = torch.randn(2, 64, 16, 16, device="cuda")

    def step() -> torch.Tensor:
        out = compiled(x)
        out.backward(grad)  # the backward graph compiles here, on first use
        return out

    got, records = compiled_records(step)
    got_grad = x.grad.clone()
    x.grad = None
    stem.zero_grad()
    expected = stem(x)
    expected.backward(grad)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_grad, x.grad, rtol=1e-3, atol=1e-3)
    groups = _pool_groups(records)
    forward = [pool for pool, _ in groups if pool["spec"].startswith("max_pool2d ")]
    backward = [pool for pool, _ in groups if pool["spec"].startswith("max_pool2d_backward ")]
    assert forward and all("indices=1" in pool["spec"] for pool in forward), groups
    assert len(backward) == 1, groups
    assert _stats(records)["generated_pools_run"] == 2, _stats(records)
    assert _stats(records)["generated_kernel_fallbacks"] == 0, _stats(records)


def test_pool_alone_is_exact_in_training() -> None:
    """Values, and the gradient our backward gathers through the indices."""
    for layout, dtype in itertools.product(LAYOUTS, DTYPES):
        x = _input((3, 20, 13, 10), dtype, layout).requires_grad_()
        fn = torch.compile(
            lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
            backend="mybackend",
            options={"strict": True},
        )
        grad = torch.randn_like(F.max_pool2d(x.detach(), 3, 2, 1, ceil_mode=True))

        def step(
            fn: Callable[..., Any] = fn, x: torch.Tensor = x, grad: torch.Tensor = grad
        ) -> torch.Tensor:
            out = fn(x)
            out.backward(grad)  # the backward graph compiles here, on first use
            return out

        got, records = compiled_records(step)
        got_grad = x.grad.clone()
        x.grad = None
        expected = F.max_pool2d(x, 3, 2, 1, ceil_mode=True)
        expected.backward(grad)
        _assert_exact(got.detach(), expected.detach())
        _assert_exact(got_grad, x.grad)
        # The forward and the backward each ran a generated kernel.
        assert _stats(records)["generated_pools_run"] == 2, (layout, dtype, _stats(records))
        torch._dynamo.reset()


def test_one_kernel_serves_every_batch_size() -> None:
    fn = torch.compile(
        lambda t: F.max_pool2d(t, 3, 2, 1),
        backend="mybackend",
        dynamic=True,
        options={"strict": True},
    )
    records: list[Any] = []
    for batch in (2, 5, 32):
        x = _input((batch, 64, 20, 20), BF16, "nhwc")
        got, new = compiled_records(lambda x=x: fn(x))
        records += new
        _assert_exact(got, F.max_pool2d(x, 3, 2, 1))
    assert _stats(records)["generated_pools_run"] == 3, _stats(records)
    assert _stats(records)["generated_kernel_fallbacks"] == 0, _stats(records)


# --- the backward (max_pool2d_with_indices_backward) ------------------------


def _backward_fn(geometry: tuple[int, int, int, int, bool]) -> Callable[..., torch.Tensor]:
    kernel, stride, padding, dilation, ceil_mode = geometry

    def backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, [kernel] * 2, [stride] * 2, [padding] * 2, [dilation] * 2, ceil_mode, indices
        )

    return backward


def _backward_inputs(
    geometry: tuple[int, int, int, int, bool], x: torch.Tensor
) -> list[torch.Tensor]:
    """A gradient at the pooled values and eager's indices, in x's layout."""
    kernel, stride, padding, dilation, ceil_mode = geometry
    values, indices = F.max_pool2d_with_indices(
        x, kernel, stride, padding, dilation, ceil_mode=ceil_mode
    )
    return [torch.randn_like(values), x, indices]


def _check_backward(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> Any:
    """Compiles the backward for these inputs and runs it: the sums must equal
    eager's bit for bit (both add the windows in row-major order in the
    compute type), and the generated kernel must have run."""
    compiled = _compile(fn, *inputs)
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert pool["spec"].startswith("max_pool2d_backward "), pool["spec"]
    (got,) = compiled.run(list(inputs))
    _assert_exact(got, fn(*inputs))
    stats = compiled.stats()
    assert stats["generated_pools_run"] == 1, (stats, pool)
    assert stats["generated_kernel_fallbacks"] == 0, (stats, compiled.report()["kernels"])
    return compiled


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_backward_of_every_geometry_matches_eager_exactly(
    geometry: tuple[int, int, int, int, bool], layout: str, dtype: torch.dtype
) -> None:
    # Stride 1 lets up to kernel^2 windows choose one element: their sum.
    x = _input((2, 20, 9, 11), dtype, layout)
    _check_backward(_backward_fn(geometry), _backward_inputs(geometry, x))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("channels", [1, 3, 8, 64, 65])
@pytest.mark.parametrize("batch", [1, 32])
def test_backward_channels_and_batches(
    batch: int, channels: int, layout: str, dtype: torch.dtype
) -> None:
    geometry = (3, 2, 1, 1, False)
    x = _input((batch, channels, 15, 14), dtype, layout)
    _check_backward(_backward_fn(geometry), _backward_inputs(geometry, x))


def test_backward_ties_choose_one_element_per_window() -> None:
    """Many equal values: every window names its first maximum, and only that
    element receives the window's gradient."""
    geometry = (3, 1, 1, 1, False)
    x = torch.randint(0, 2, (2, 16, 10, 10), device="cuda").to(BF16)
    x = x.contiguous(memory_format=torch.channels_last)
    _check_backward(_backward_fn(geometry), _backward_inputs(geometry, x))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_backward_adds_the_branch_gradients_in_its_prologue(layout: str) -> None:
    """ResNet-50's stem: the gradient at the pool is the sum of layer 1's two
    branches, added (and rounded to bf16, as eager stores it) at each load."""
    pool_backward = _backward_fn((3, 2, 1, 1, False))

    def backward(
        a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, indices: torch.Tensor
    ) -> torch.Tensor:
        return pool_backward(a + b, x, indices)

    grad, x, indices = _backward_inputs((3, 2, 1, 1, False), _input((4, 64, 56, 56), BF16, layout))
    compiled = _check_backward(backward, [grad, torch.randn_like(grad), x, indices])
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert "with 1 prologue elementwise ops" in pool["why"], pool["why"]
    assert len(compiled.report()["kernels"]) == 1, compiled.report()["kernels"]


def test_backward_indices_in_another_layout_run_aten_for_that_call() -> None:
    geometry = (3, 2, 1, 1, False)
    fn = _backward_fn(geometry)
    compiled = _compile(fn, *_backward_inputs(geometry, _input((2, 16, 9, 9), BF16, "nhwc")))
    grad, x, indices = _backward_inputs(geometry, _input((2, 16, 9, 9), BF16, "nhwc"))
    nchw_indices = indices.contiguous()
    (got,) = compiled.run([grad, x, nchw_indices])
    _assert_exact(got, fn(grad, x, nchw_indices))
    stats = compiled.stats()
    assert stats["generated_kernel_fallbacks"] == 1 and stats["generated_pools_run"] == 0, stats
    (pool,) = [k for k in compiled.report()["kernels"] if k["kind"] == "pool"]
    assert "the indices are not dense nhwc" in pool["problem"], pool["problem"]
