"""GPU-marked: tiled transposing copies (Note [Tiled transposing copies])
against ATen's copy.

A clone into channels-last and back, and autocast's cast before a weight's
copy, run as one generated tiled kernel each, equal to eager's copy bit for
bit (strides included) for odd sizes and every float dtype; inside a
compiled model a convolution's output copy runs so (its weight and input
copies join a cast group); a call whose
input has other strides than compiled runs ATen's copy; with the eager floor
the copy is timed against its ATen form; a CUDA graph replays it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

CHANNELS_LAST = torch.channels_last
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Weights [Cout, Cin, kh, kw] (3x3 and 7x7, odd and 3-channel ones) and
# activations [N, C, H, W] (odd sizes, a width of 1).
SHAPES = [
    (64, 64, 3, 3),
    (33, 17, 7, 7),
    (1000, 3, 3, 3),
    (256, 128, 3, 3),
    (64, 3, 7, 7),
    (1, 64, 56, 56),
    (2, 3, 37, 41),
    (8, 96, 5, 1),
]
# Only the tiled kernel may run: the floors would time it against ATen's copy.
ENGINE_ONLY: dict[str, Any] = {"strict": True, "eager_floor": False}


def _to_channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.clone(memory_format=CHANNELS_LAST)


def _to_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous()


def _compile(fn: Callable[..., Any], *examples: torch.Tensor) -> Any:
    """The core's compile of fn's ATen graph (no floor: the kernel runs)."""
    lowered = lower(make_fx(fn, tracing_mode="fake")(*examples), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def _transposes(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [k for k in report["kernels"] if k["kind"] == "transpose"]


def _launches(compiled: Any, inputs: list[torch.Tensor]) -> tuple[Any, int]:
    """The compiled graph's results on `inputs` and how many tiled copies
    the call ran (the run counter: profiler kernel names may name another
    module's kernel of the same code)."""
    before = compiled.stats()["generated_transposes_run"]
    result = compiled.run(inputs)
    torch.cuda.synchronize()
    return result, compiled.stats()["generated_transposes_run"] - before


def _assert_bit_exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got.dtype, got.shape, want.shape)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    assert torch.equal(got.view(bits), want.view(bits))


def _run_generated(fn: Callable[..., Any], x: torch.Tensor, example: torch.Tensor) -> Any:
    """fn compiled for `example`, run on x: one tiled copy, launched once,
    equal to eager's fn(x); returns the compiled graph."""
    compiled = _compile(fn, example)
    (group,) = _transposes(compiled.report())
    assert group["compiled"] is True, group
    assert group["kernel"].startswith("transpose: mb_transpose_"), group["kernel"]
    (got,), launched = _launches(compiled, [x])
    _assert_bit_exact(got, fn(x))
    assert launched == 1, launched
    stats = compiled.stats()
    assert stats["generated_transposes_run"] == 1, stats
    assert stats["generated_kernel_fallbacks"] == 0, (stats, group)
    return compiled


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_copy_into_channels_last_is_atens_bit_for_bit(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = torch.randn(shape, device="cuda").to(dtype)
    _run_generated(_to_channels_last, x, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_copy_back_to_nchw_is_atens_bit_for_bit(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = torch.randn(shape, device="cuda").to(dtype).contiguous(memory_format=CHANNELS_LAST)
    _run_generated(_to_contiguous, x, x)


# (source, target): autocast's weight casts, and a gradient's cast back.
CASTS = [
    (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.bfloat16),
]


@pytest.mark.parametrize(("source", "target"), CASTS, ids=str)
@pytest.mark.parametrize("shape", [(64, 64, 3, 3), (33, 17, 7, 7), (1000, 3, 3, 3)], ids=str)
def test_a_cast_before_the_copy_rides_in_it(
    shape: tuple[int, ...], source: torch.dtype, target: torch.dtype
) -> None:
    """Autocast's weight path: the cast and the layout copy are one tiled
    kernel that rounds each element as eager's cast does."""
    x = torch.randn(shape, device="cuda").to(source)

    def fn(w: torch.Tensor) -> torch.Tensor:
        return w.to(target).clone(memory_format=CHANNELS_LAST)

    compiled = _run_generated(fn, x, x)
    (group,) = _transposes(compiled.report())
    assert len(group["nodes"]) == 2, group


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_any_base_address_is_read(dtype: torch.dtype) -> None:
    """An input one element into its storage (2-byte aligned only)."""
    shape = (33, 17, 7, 7)
    numel = 33 * 17 * 7 * 7
    x = torch.randn(numel + 1, device="cuda").to(dtype)[1:].view(shape)
    _run_generated(_to_channels_last, x, torch.empty(shape, device="cuda", dtype=dtype))


def test_a_call_of_other_strides_runs_atens_copy() -> None:
    """Compiled for a contiguous weight, called with one whose kh and kw
    are transposed in memory: the parts no longer collapse, so the call
    runs the ATen copy (same values); the next contiguous call runs the
    kernel again."""
    example = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.bfloat16)
    compiled = _compile(_to_channels_last, example)
    swapped = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.bfloat16).transpose(2, 3)
    (got,), launched = _launches(compiled, [swapped])
    _assert_bit_exact(got, _to_channels_last(swapped))
    assert launched == 0, launched
    stats = compiled.stats()
    assert stats["generated_kernel_fallbacks"] == 1, stats
    (group,) = _transposes(compiled.report())
    assert "do not collapse" in group["problem"], group["problem"]
    (got,), launched = _launches(compiled, [example])
    _assert_bit_exact(got, _to_channels_last(example))
    assert launched == 1 and compiled.stats()["generated_transposes_run"] == 1


def test_a_pointwise_weight_is_not_reordered() -> None:
    """A 1x1 weight lists its elements in the same order in both layouts:
    no tiled copy is planned, and the copy stays ATen's."""
    x = torch.randn(256, 128, 1, 1, device="cuda", dtype=torch.bfloat16)
    compiled = _compile(_to_channels_last, x)
    assert _transposes(compiled.report()) == []
    (got,) = compiled.run([x])
    _assert_bit_exact(got, _to_channels_last(x))


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast_bf16"])
def test_a_convolutions_copies_run_tiled_in_a_compiled_model(autocast: bool) -> None:
    """The channels-last plan (Note [Channels-last planning]) copies the
    weight and the input into channels-last and the output back. The first
    two read graph inputs only and share one cast-group launch as layout
    copies (Note [Grouped layout copies]); the output's is a tiled copy (with
    autocast's casts inside); no fallback, and the model's result is eager's
    up to cuDNN's choice of kernels."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(17, 33, 7, padding=3), nn.ReLU()).cuda().eval()
    x = torch.randn(2, 17, 20, 20, device="cuda")
    # A lone convolution is planned channels-last only when told to (Note
    # [Layout regions pay for their copies]).
    options = {**ENGINE_ONLY, "channels_last_everywhere": True}
    compiled = torch.compile(model, backend="mybackend", options=options)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        got, records = compiled_records(lambda: compiled(x))
        want = model(x)
    tolerance = 2e-2 if autocast else 1e-2  # bf16, or TF32 in either side's convolution
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
    assert got.stride() == want.stride()
    (record,) = [r for r in records if r.compiled is not None]
    report = record.compiled.report()
    (copy,) = _transposes(report)
    assert "2 x [400, 33] into 2 x [33, 400]" in copy["why"], copy["why"]  # the output, back
    assert copy["compiled"] is True and not copy["problem"], copy
    (group,) = [k for k in report["kernels"] if k["kind"] == "cast_group"]
    assert "2 change layout" in group["why"], group["why"]
    # Autocast's casts of the weight and the input ride in their layout copies.
    assert ("pairs=f32->bf16" in group["spec"]) == autocast, group["spec"]
    stats = record.compiled.stats()
    assert stats["generated_transposes_run"] == 1, stats
    assert stats["generated_cast_groups_run"] == 1, stats
    assert stats["generated_kernel_fallbacks"] == 0, stats
    assert stats["conv_groups_run"] == 1, stats


def test_a_copy_is_timed_against_its_aten_form(tmp_path: Path) -> None:
    """Note [A group is timed against its ATen form]: the first call times
    the tiled copy and ATen's; the report says which runs, and both give
    eager's values."""
    x = torch.randn(512, 512, 3, 3, device="cuda", dtype=torch.bfloat16)
    options = {"strict": True, "eager_floor": True, "kernel_cache_dir": str(tmp_path)}
    compiled = torch.compile(_to_channels_last, backend="mybackend", options=options)
    first, records = compiled_records(lambda: compiled(x))
    second = compiled(x)
    for got in (first, second):
        _assert_bit_exact(got, _to_channels_last(x))
    (record,) = [r for r in records if r.compiled is not None]
    (kernel,) = _transposes(record.compiled.report())
    timed = re.fullmatch(
        r"timed against ATen: engine ([\d.]+) us, ATen ([\d.]+) us: (ATen|engine) runs",
        kernel["floor"],
    )
    assert timed, kernel["floor"]
    assert record.compiled.stats()["generated_kernel_fallbacks"] == 0


def test_a_cuda_graph_replays_the_copy() -> None:
    compiled = torch.compile(
        _to_channels_last,
        backend="mybackend",
        options={**ENGINE_ONLY, "cuda_graphs": True},
    )
    records = []
    for _ in range(4):
        x = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16)
        got, new = compiled_records(lambda x=x: compiled(x))
        records += new
        _assert_bit_exact(got, _to_channels_last(x))
    stats: dict[str, int] = {}
    for record in records:
        for key, value in record.compiled.stats().items():
            stats[key] = stats.get(key, 0) + value
    assert stats["cuda_graph_captures"] == 1 and stats["cuda_graph_replays"] >= 2, stats
    assert stats["generated_transposes_run"] >= 1, stats
