"""GPU-marked: convolutions through cuDNN frontend graphs (CUDA engine II)
against eager, on fresh random inputs.

Every test asserts that cuDNN groups actually ran (ExecutionStats'
conv_groups_run, with no conv_fallbacks), so none can pass by quietly running
the ATen form; convolutions the planner refuses (transposed, 1-d) assert the
ATen path instead.

Precisions: bf16 and fp16 compute in fp32 inside cuDNN; fp32 runs twice,
with TF32 allowed for cuDNN (torch's default, eager uses it too) and with it
off (then neither side may use tensor cores).
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.autograd import DeviceType

from mybackend import _C
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

# name -> (dtype, TF32 allowed for cuDNN, tolerance)
PRECISIONS: dict[str, tuple[torch.dtype, bool, dict[str, float]]] = {
    "bf16": (torch.bfloat16, True, {"rtol": 2e-2, "atol": 2e-2}),
    "fp16": (torch.float16, True, {"rtol": 1e-2, "atol": 1e-2}),
    "tf32": (torch.float32, True, {"rtol": 1e-2, "atol": 1e-2}),
    "fp32": (torch.float32, False, {"rtol": 1e-4, "atol": 1e-4}),
}

C_IN, C_OUT, BATCH, HW = 16, 32, 2, 12
# The group floor may hand a conv group back to its ATen form when that is
# faster on the GPU at hand (Note [A group is timed against its ATen form] in
# src_cpp/runtime/group_floor.h); these tests are of the cuDNN path, so it is off, and
# test_a_conv_group_is_timed_against_its_aten_form tests the floor. A lone
# convolution does not pay for its layout copies (Note [Layout regions pay for
# their copies]): every one is planned, as in the CNNs the plan is for.
ENGINE_ONLY: dict[str, Any] = {
    "strict": True,
    "eager_floor": False,
    "channels_last_everywhere": True,
}

# name -> (module factory, input shape)
FORMS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "3x3": (lambda: nn.Conv2d(C_IN, C_OUT, 3, padding=1), (BATCH, C_IN, HW, HW)),
    "strided": (lambda: nn.Conv2d(C_IN, C_OUT, 3, stride=2, padding=1), (BATCH, C_IN, HW, HW)),
    "unpadded": (lambda: nn.Conv2d(C_IN, C_OUT, 5), (BATCH, C_IN, HW, HW)),
    "dilated": (lambda: nn.Conv2d(C_IN, C_OUT, 3, padding=2, dilation=2), (BATCH, C_IN, HW, HW)),
    "asymmetric": (
        lambda: nn.Conv2d(C_IN, C_OUT, (3, 1), stride=(2, 1), padding=(1, 0)),
        (BATCH, C_IN, HW, HW + 3),
    ),
    "grouped": (lambda: nn.Conv2d(C_IN, C_OUT, 3, padding=1, groups=4), (BATCH, C_IN, HW, HW)),
    "depthwise": (
        lambda: nn.Conv2d(C_IN, C_IN, 3, padding=1, groups=C_IN),
        (BATCH, C_IN, HW, HW),
    ),
    "1x1": (lambda: nn.Conv2d(C_IN, C_OUT, 1), (BATCH, C_IN, HW, HW)),
    "1x1_no_bias": (lambda: nn.Conv2d(C_IN, C_OUT, 1, bias=False), (BATCH, C_IN, HW, HW)),
    "3d": (lambda: nn.Conv3d(C_IN, C_OUT, 3, padding=1), (BATCH, C_IN, 6, 6, 6)),
}


@contextlib.contextmanager
def _cudnn_tf32(allowed: bool) -> Iterator[None]:
    # The flags() context manager: torch.testing's common_utils (imported by
    # the OpInfo sweep) forbids setting cuDNN flags directly.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=allowed):
        yield


@pytest.fixture(params=list(PRECISIONS))
def precision(request: pytest.FixtureRequest) -> Iterator[tuple[torch.dtype, dict[str, float]]]:
    dtype, tf32, tol = PRECISIONS[request.param]
    with _cudnn_tf32(tf32):
        yield dtype, tol


def _layout(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    if not channels_last:
        return t.contiguous()
    fmt = torch.channels_last_3d if t.dim() == 5 else torch.channels_last
    return t.contiguous(memory_format=fmt)


def _model(factory: Any, dtype: torch.dtype, channels_last: bool) -> nn.Module:
    model = factory().cuda().to(dtype)
    if channels_last:
        fmt = torch.channels_last_3d if isinstance(model, nn.Conv3d) else torch.channels_last
        model = model.to(memory_format=fmt)
    return model


def _conv_stats(records: list[Any], kind: str) -> dict[str, int]:
    (record,) = [r for r in records if r.kind == kind]
    return record.compiled.stats()


def _conv_kernels(records: list[Any], kind: str) -> list[dict[str, Any]]:
    (record,) = [r for r in records if r.kind == kind]
    return [k for k in record.core_report["kernels"] if k["kind"] == "conv"]


def _assert_all_ran(records: list[Any], kind: str, groups: int) -> None:
    kernels = _conv_kernels(records, kind)
    assert len(kernels) == groups, kernels
    stats = _conv_stats(records, kind)
    assert stats["conv_fallbacks"] == 0, [k.get("problem") for k in kernels]
    assert stats["conv_groups_run"] == groups, stats


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("form", list(FORMS))
def test_conv_forward_and_backward_match_eager(
    form: str, channels_last: bool, precision: Any
) -> None:
    dtype, tol = precision
    factory, shape = FORMS[form]
    torch.manual_seed(0)
    eager = _model(factory, dtype, channels_last)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = _layout(torch.randn(*shape, device="cuda", dtype=dtype), channels_last)

    def step(m: nn.Module) -> list[torch.Tensor]:
        xi = x.detach().requires_grad_()
        y = m(xi)
        y.backward(grad)
        return [y, xi.grad] + [p.grad for p in m.parameters()]

    with torch.no_grad():
        grad = _layout(torch.randn_like(eager(x)), channels_last)
    want = step(eager)
    got, records = compiled_records(lambda: step(compiled))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, **tol)
    _assert_all_ran(records, "forward", 1)
    _assert_all_ran(records, "backward", 1)
    (backward,) = _conv_kernels(records, "backward")
    assert backward["kernel"] == "cudnn: conv_dgrad/conv_wgrad", backward
    # The output keeps eager's memory format (Note [Conv layout] in conv_group.h).
    assert got[0].stride() == want[0].stride()


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(C_IN, C_OUT, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(C_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class ResidualBlock(nn.Module):
    """conv-bn-relu, conv-bn, + identity, relu."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(C_IN, C_IN, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(C_IN)
        self.c2 = nn.Conv2d(C_IN, C_IN, 1, bias=False)
        self.b2 = nn.BatchNorm2d(C_IN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


class ConvBiasResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(C_IN, C_IN, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + x)


def _randomize_batch_norms(model: nn.Module) -> None:
    """Non-trivial statistics and affine parameters (fresh ones are 0/1)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_(1, 0.2)
                m.bias.normal_(0, 0.2)


# name -> (module, epilogue names of its conv groups in order)
EPILOGUE_MODELS: dict[str, tuple[Any, list[str]]] = {
    "bn_relu": (ConvBnRelu, ["batch_norm+relu"]),
    "residual_block": (ResidualBlock, ["batch_norm+relu", "batch_norm+residual+relu"]),
    "bias_residual_relu": (ConvBiasResidual, ["bias+residual+relu"]),
}


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("name", list(EPILOGUE_MODELS))
def test_fused_inference_epilogues_match_eager(
    name: str, channels_last: bool, precision: Any
) -> None:
    dtype, tol = precision
    factory, epilogues = EPILOGUE_MODELS[name]
    torch.manual_seed(0)
    model = _model(factory, dtype, channels_last).eval()
    _randomize_batch_norms(model)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda", dtype=dtype), channels_last)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        want = model(x)
    torch.testing.assert_close(got, want, **tol)
    kernels = _conv_kernels(records, "inference")
    # mybackend's table decomposes inference batch norm (x*scale + shift,
    # hoisted): a conv followed by batch norm reaches cuDNN with no epilogue,
    # and the affine, residual add and ReLU run in one generated kernel.
    expected = ["none" if "batch_norm" in e else e for e in epilogues]
    assert [k["why"].split("epilogue ")[1].split(";")[0] for k in kernels] == expected, kernels
    _assert_all_ran(records, "inference", len(epilogues))


def test_batch_norm_statistics_are_read_on_every_call() -> None:
    """Scale and shift come from the graph's tensors per call, not from compile time."""
    model = _model(ConvBnRelu, torch.float32, True).eval()
    _randomize_batch_norms(model)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda"), True)
    with torch.no_grad():
        first = compiled(x)
        torch.testing.assert_close(first, model(x), rtol=1e-2, atol=1e-2)
        _randomize_batch_norms(model)  # in place: no recompilation
        second, records = compiled_records(lambda: compiled(x))
        assert records == []  # the same compiled graph ran
        torch.testing.assert_close(second, model(x), rtol=1e-2, atol=1e-2)
        assert not torch.allclose(first, second)


def test_plans_are_cached_per_signature() -> None:
    model = _model(ConvBnRelu, torch.bfloat16, True).eval()
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda", dtype=torch.bfloat16), True)
    with torch.no_grad():
        compiled(x)
        before = _C.cudnn_conv_cache_stats()
        for _ in range(3):
            compiled(x)
        after = _C.cudnn_conv_cache_stats()
    assert after["misses"] == before["misses"], (before, after)  # the hot path builds nothing
    assert after["entries"] == before["entries"]
    assert after["hits"] == before["hits"] + 3


def test_option_cudnn_off_runs_aten() -> None:
    model = _model(ConvBnRelu, torch.bfloat16, True).eval()
    compiled = torch.compile(model, backend="mybackend", options={**ENGINE_ONLY, "cudnn": False})
    x = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda", dtype=torch.bfloat16), True)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), rtol=2e-2, atol=2e-2)
    assert _conv_kernels(records, "inference") == []
    assert _conv_stats(records, "inference")["conv_groups_run"] == 0


@pytest.mark.parametrize(
    "factory, shape",
    [
        (lambda: nn.ConvTranspose2d(C_IN, C_OUT, 3, stride=2), (BATCH, C_IN, HW, HW)),
        (lambda: nn.Conv1d(C_IN, C_OUT, 3, padding=1), (BATCH, C_IN, HW)),
    ],
    ids=["transposed", "1d"],
)
def test_refused_convolutions_run_aten(factory: Any, shape: tuple[int, ...]) -> None:
    model = factory().cuda()
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = torch.randn(*shape, device="cuda")
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), rtol=1e-2, atol=1e-2)
    assert _conv_kernels(records, "inference") == []
    assert _conv_stats(records, "inference")["conv_groups_run"] == 0


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def test_resnet50_inference_channels_last_bf16_fuses_every_conv() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    reference = torchvision.models.resnet50().cuda().eval()  # fp32, the yardstick
    reference = reference.to(memory_format=torch.channels_last)
    model = copy.deepcopy(reference).to(torch.bfloat16)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = torch.randn(2, 3, 96, 96, device="cuda").contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x.to(torch.bfloat16)))
        eager_error = _relative_error(model(x.to(torch.bfloat16)), reference(x))
        error = _relative_error(got, reference(x))
    # bf16 through 50 layers: as close to fp32 as eager bf16 is (the fused
    # epilogue rounds once where eager rounds after every op).
    assert error <= 1.5 * eager_error + 1e-2, (error, eager_error)
    kernels = _conv_kernels(records, "inference")
    assert len(kernels) == 53, len(kernels)  # every convolution of ResNet-50
    # Batch norm reaches the planner decomposed (x*scale + shift, scale and
    # shift hoisted): it runs in the generated kernel after each conv.
    assert all(k["why"].startswith("cuDNN conv_fprop") for k in kernels), [
        k["why"] for k in kernels
    ]
    _assert_all_ran(records, "inference", 53)


def test_residual_block_training_step_matches_eager() -> None:
    torch.manual_seed(0)
    eager = _model(ResidualBlock, torch.float32, True)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    x = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda"), True)
    grad = _layout(torch.randn(BATCH, C_IN, HW, HW, device="cuda"), True)

    def step(m: nn.Module) -> list[torch.Tensor]:
        xi = x.detach().requires_grad_()
        m(xi).backward(grad)
        return [xi.grad] + [p.grad for p in m.parameters()]

    want = step(eager)
    got, records = compiled_records(lambda: step(compiled))
    for g, w in zip(got, want, strict=True):
        assert _relative_error(g, w) < 1e-2
    # Training batch norm reads each convolution's output: plain conv_fprop groups.
    _assert_all_ran(records, "forward", 2)
    _assert_all_ran(records, "backward", 2)


def _gpu_activity(fn: Any) -> tuple[Any, list[str]]:
    """fn's result and the names of the kernels, copies and fills it ran on
    the GPU (not the runtime calls that launched them: libraries query
    function attributes on some calls and not on others)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    return result, [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]


def test_a_one_by_one_weight_with_contiguous_strides_is_read_in_place() -> None:
    """Note [Size-one strides]: a 1x1 weight [K, C, 1, 1] with contiguous
    strides beside a channels-last input is channels-last in memory. The
    graph copies it nowhere, and cuDNN runs the same kernels, and no copy,
    as for the same weight with channels-last strides."""

    def conv_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(nn.functional.conv2d(x, w, b))

    torch.manual_seed(0)
    x = torch.randn(8, 64, 14, 14, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(128, 64, 1, 1, device="cuda", dtype=torch.bfloat16) / 8
    b = torch.randn(128, device="cuda", dtype=torch.bfloat16)
    w_channels_last = w.clone(memory_format=torch.channels_last)
    assert w.stride() == (64, 1, 1, 1) and w_channels_last.stride() == (64, 1, 64, 64)

    runs = {}
    for name, weight in (("contiguous", w), ("channels_last", w_channels_last)):
        torch._dynamo.reset()
        compiled = torch.compile(conv_relu, backend="mybackend", options=ENGINE_ONLY)
        with torch.no_grad():
            _, records = compiled_records(lambda: compiled(x, weight, b))  # noqa: B023
            _assert_all_ran(records, "inference", 1)
            (record,) = records
            assert not [
                n for n in record.gm.graph.nodes if n.target is torch.ops.aten.clone.default
            ]
            got, runs[name] = _gpu_activity(lambda: compiled(x, weight, b))  # noqa: B023
        torch.testing.assert_close(got, conv_relu(x, weight, b), rtol=2e-2, atol=2e-2)
    assert not [n for n in runs["contiguous"] if "memcpy" in n.lower() or "copy" in n.lower()], runs
    assert runs["contiguous"] == runs["channels_last"], runs


@pytest.mark.parametrize("eager_floor", [True, False], ids=["floor", "no_floor"])
def test_a_conv_group_is_timed_against_its_aten_form(eager_floor: bool, tmp_path: Path) -> None:
    """Note [A group is timed against its ATen form]: ConvNeXt-T's depthwise
    7x7 with its bias, where cuDNN's fused engine took 12x ATen's time on an
    H200. The first call times both forms; the faster one (the library call
    unless ATen wins by the margin) runs every later call; the report says
    which, with the times; eager_floor=False times nothing. A later compile
    with the same kernel cache folder starts with the saved choice (Note
    [Group floor choices on disk])."""
    torch.manual_seed(0)
    conv = nn.Conv2d(96, 96, 7, padding=3, groups=96).cuda().to(torch.bfloat16)
    conv = conv.to(memory_format=torch.channels_last)
    x = torch.randn(8, 96, 56, 56, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    options = {"strict": True, "eager_floor": eager_floor, "kernel_cache_dir": str(tmp_path)}
    compiled = torch.compile(conv, backend="mybackend", options=options)
    with torch.no_grad():
        want = conv(x)
        first, records = compiled_records(lambda: compiled(x))
        second = compiled(x)
    for got in (first, second):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    (record,) = records
    # A fresh report: the record's own is made once, and a debug log reads it
    # while compiling, before any call has timed anything.
    (kernel,) = [k for k in record.compiled.report()["kernels"] if k["kind"] == "conv"]
    stats = record.compiled.stats()
    if not eager_floor:
        assert kernel["floor"] == "" and stats["conv_groups_run"] == 2, (kernel, stats)
        return
    timed = re.fullmatch(
        r"timed against ATen: engine ([\d.]+) us, ATen ([\d.]+) us: (ATen|engine) runs",
        kernel["floor"],
    )
    assert timed, kernel["floor"]
    engine_us, aten_us = float(timed[1]), float(timed[2])
    aten_runs = aten_us < engine_us * 0.95
    assert (timed[3] == "ATen") == aten_runs
    assert stats["conv_groups_run"] == (1 if aten_runs else 2), stats  # the timed call counts
    assert stats["groups_run_as_faster_aten"] == (1 if aten_runs else 0), stats
    assert stats["conv_fallbacks"] == 0, stats
    # Another compile of the same group (as a later process would): the
    # saved choice, no timing.
    torch._dynamo.reset()
    again = torch.compile(conv, backend="mybackend", options=options)
    with torch.no_grad():
        got, records = compiled_records(lambda: again(x))
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    (kernel,) = [k for k in records[0].compiled.report()["kernels"] if k["kind"] == "conv"]
    assert kernel["floor"].endswith(f"{timed[3]} runs, saved"), kernel["floor"]
    stats = records[0].compiled.stats()
    assert stats["conv_groups_run"] == (0 if aten_runs else 1), stats


class PatchEmbedding(nn.Module):
    """ViT's patch embedding: non-overlapping 8x8 patches of an RGB image,
    as tokens, normalized."""

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 64, 8, stride=8)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.patches(x).flatten(2).transpose(1, 2))


@pytest.mark.parametrize("name", ["bf16", "fp32"])
def test_a_patch_embedding_runs_as_one_product(name: str) -> None:
    """Note [Patch convolutions as products]: no convolution runs; the
    product (cuBLASLt) does, and the values are eager's."""
    dtype, tf32, tol = PRECISIONS[name]
    torch.manual_seed(0)
    model = PatchEmbedding().cuda().to(dtype).eval()
    x = torch.randn(2, 3, 64, 48, device="cuda", dtype=dtype)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.no_grad(), _cudnn_tf32(tf32):
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), **tol)
    assert _conv_kernels(records, "inference") == []
    stats = _conv_stats(records, "inference")
    assert stats["matmul_groups_run"] == 1 and stats["matmul_fallbacks"] == 0, stats


class DepthwiseBlock(nn.Module):
    """ConvNeXt's: a depthwise 7x7 with a bias, then a LayerNorm over channels."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(C_OUT, C_OUT, 7, padding=3, groups=C_OUT)
        self.norm = nn.LayerNorm(C_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.depthwise(x).permute(0, 2, 3, 1))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_a_depthwise_convolution_adds_its_bias_in_a_generated_kernel(
    channels_last: bool, precision: Any
) -> None:
    """Note [Grouped convolution biases]: cuDNN runs the convolution alone,
    the bias is added by a generated kernel, and the values are eager's."""
    dtype, tol = precision
    torch.manual_seed(0)
    model = _model(DepthwiseBlock, dtype, channels_last).eval()
    x = _layout(torch.randn(BATCH, C_OUT, HW, HW, device="cuda", dtype=dtype), channels_last)
    compiled = torch.compile(model, backend="mybackend", options=ENGINE_ONLY)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), **tol)
    (conv,) = _conv_kernels(records, "inference")
    assert conv["why"].startswith("cuDNN conv_fprop with epilogue none"), conv
    _assert_all_ran(records, "inference", 1)
    (record,) = [r for r in records if r.kind == "inference"]
    ops = [n["op"] for n in record.core_report["nodes"]]
    generated = [
        k for k in record.core_report["kernels"] if k["kind"] in ("pointwise", "norm", "reduction")
    ]
    assert any("aten::add.Tensor" in [ops[n] for n in k["nodes"]] for k in generated), generated
    stats = record.compiled.stats()
    assert stats["generated_kernel_fallbacks"] == 0, stats
