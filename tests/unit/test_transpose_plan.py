"""Stage 7: tiled transposing copies (Note [Tiled transposing copies]) on
ATen graphs traced with fake CUDA tensors.

The copies are what the channels-last plan writes (a convolution weight
and activation into channels-last, autocast's cast before the weight's
copy) and plain ``clone(memory_format=...)`` graphs; compiling runs NVRTC,
which needs no GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from mybackend.passes.layout import plan_channels_last
from tests.unit.test_matmul_plan import _graph_inputs, _inference, _kernels, _on_fake_cuda

BF16 = torch.bfloat16
CHANNELS_LAST = torch.channels_last


def _to_channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.clone(memory_format=CHANNELS_LAST)


def _autocast_weight(w: torch.Tensor) -> torch.Tensor:
    return w.to(BF16).clone(memory_format=CHANNELS_LAST)


def _transposes(
    fn: Callable[..., Any] | torch.fx.GraphModule, *examples: torch.Tensor, **options: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The transpose groups of fn on fake CUDA, and all groups (each with its ops)."""
    gm = fn if isinstance(fn, torch.fx.GraphModule) else _on_fake_cuda(fn, *examples)
    kernels, ops = _kernels(gm, **{"generated_kernels": True, **options})
    for k in kernels:
        k["ops"] = [ops[n] for n in k["nodes"]]
    return [k for k in kernels if k["kind"] == "transpose"], kernels


def test_a_weight_into_channels_last_is_a_compiled_tiled_copy() -> None:
    (copy,), kernels = _transposes(_to_channels_last, torch.randn(64, 64, 3, 3, dtype=BF16))
    assert len(kernels) == 1, kernels
    assert copy["ops"] == ["aten::clone.default"]
    assert copy["spec"].startswith("transpose in=bf16 out=bf16 tile=64x9 index=i32"), copy["spec"]
    assert "64 x [64, 9] into 64 x [9, 64]" in copy["why"], copy["why"]
    assert copy["compiled"] is True, copy
    assert copy["kernel"].startswith("transpose: mb_transpose_"), copy["kernel"]
    assert "mb::transpose_tiles<64, 9, 256, I>" in copy["source"]


def test_autocasts_cast_rides_in_the_weights_copy() -> None:
    (copy,), kernels = _transposes(_autocast_weight, torch.randn(33, 17, 7, 7))
    assert len(kernels) == 1, kernels
    assert copy["ops"] == ["aten::_to_copy.default", "aten::clone.default"]
    assert copy["spec"].startswith("transpose in=f32 out=bf16 tile=17x49"), copy["spec"]
    assert "cast f32->bf16" in copy["why"], copy["why"]
    assert copy["compiled"] is True, copy


@pytest.mark.parametrize("to_channels_last", [True, False], ids=["nchw_to_nhwc", "nhwc_to_nchw"])
def test_activations_between_layouts(to_channels_last: bool) -> None:
    x = torch.randn(1, 64, 56, 56, dtype=BF16)
    if to_channels_last:
        (copy,), _ = _transposes(_to_channels_last, x)
        view = "1 x [64, 3136] into 1 x [3136, 64]"  # [C, H*W] -> [H*W, C]
    else:
        x = x.contiguous(memory_format=CHANNELS_LAST)
        (copy,), _ = _transposes(lambda t: t.contiguous(), x)
        view = "1 x [3136, 64] into 1 x [64, 3136]"
    assert view in copy["why"], copy["why"]
    assert "tile=64x64" in copy["spec"], copy["spec"]
    assert copy["compiled"] is True, copy


def test_the_channels_last_plans_copies_are_grouped() -> None:
    """The layout pass's copies of a convolution's weight and input read
    graph inputs only: one cast group of two layout copies (Note [Grouped
    layout copies]); a lone one is a tiled copy (next test)."""
    conv = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()).to(BF16).eval()
    gm = _inference(conv, torch.randn(2, 8, 10, 10, dtype=BF16))
    cuda_gm = _on_fake_cuda(gm, *_graph_inputs(gm))
    planned, copies = plan_channels_last(cuda_gm, _graph_inputs(cuda_gm), every_region=True)
    assert copies == 2
    transposes, kernels = _transposes(planned)
    assert transposes == [], kernels
    (group,) = [k for k in kernels if k["kind"] == "cast_group"]
    assert group["ops"] == ["aten::clone.default"] * 2, group
    assert "2 change layout (Note [Grouped layout copies])" in group["why"], group["why"]
    assert group["spec"].startswith("cast_group pairs=bf16->bf16 "), group["spec"]
    assert "layout_copies" in group["spec"], group["spec"]
    assert group["compiled"] is True, group
    assert "conv" in [k["kind"] for k in kernels]


def test_copies_that_keep_their_path() -> None:
    # A 1x1 weight lists its elements in the same order in both layouts.
    found, kernels = _transposes(_to_channels_last, torch.randn(256, 128, 1, 1, dtype=BF16))
    assert found == [] and [k["kind"] for k in kernels] == ["aten_sequence"], kernels
    # Generated kernels off: ATen's copy.
    found, kernels = _transposes(
        _to_channels_last, torch.randn(64, 64, 3, 3, dtype=BF16), generated_kernels=False
    )
    assert found == [] and [k["kind"] for k in kernels] == ["aten_sequence"], kernels
