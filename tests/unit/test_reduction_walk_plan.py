"""Stage 7: reductions over a channels-last input walk it in memory order
(Note [Reductions walked in memory order] in
src_cpp/fusion/reduction_planner.h), on fake CUDA graphs planned without a
GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.unit.test_matmul_plan import _kernels, _on_fake_cuda

CL = torch.channels_last


def _reductions(fn: Callable[..., Any], *shapes_and_formats: Any) -> list[dict[str, Any]]:
    """The reduction groups of fn traced on fake CUDA tensors."""
    examples = [
        torch.empty(shape).contiguous(memory_format=fmt) for shape, fmt in shapes_and_formats
    ]
    kernels, _ = _kernels(_on_fake_cuda(fn, *examples), generated_kernels=True)
    return [k for k in kernels if k["kind"] == "reduction"]


IMAGE = ((2, 8, 5, 6), CL)

# Each with an elementwise prologue (a lone reduction is ATen's unless it is a column).
WALKS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "mean_spatial_keepdim": (lambda x: x.exp().mean((2, 3), keepdim=True), "outer"),
    "mean_spatial": (lambda x: x.exp().mean((-1, -2)), "outer"),
    "sum_batch_and_spatial": (lambda x: x.exp().sum((0, 2, 3)), "outer"),
    "amax_channels": (lambda x: x.exp().amax(1, keepdim=True), "inner"),
}


@pytest.mark.parametrize("case", list(WALKS))
def test_channels_last_reductions_walk_memory_order(case: str) -> None:
    fn, axis = WALKS[case]
    (group,) = _reductions(fn, IMAGE)
    assert f"({axis})" in group["why"], group
    assert "1 prologue" in group["why"], group
    assert "strided" not in group["spec"].split("prologue:")[1], group["spec"]  # x read dense


def test_a_lone_squeeze_excitation_mean_is_a_generated_column_reduction() -> None:
    (group,) = _reductions(lambda x: x.mean((2, 3)), IMAGE)
    assert "mean (outer) with 0 prologue and 0 epilogue" in group["why"], group


def test_a_mean_keeps_its_elementwise_epilogue() -> None:
    (group,) = _reductions(lambda x: torch.sigmoid(x.mean((2, 3), keepdim=True)), IMAGE)
    assert "(outer) with 0 prologue and 1 epilogue" in group["why"], group


def test_channels_and_width_of_channels_last_are_one_range_in_memory() -> None:
    (group,) = _reductions(lambda x: x.exp().sum((1, 3)), IMAGE)
    assert "(inner)" in group["why"], group


@pytest.mark.parametrize(
    "fn, image",
    [
        (lambda x: x.exp().mean((0, 3)), IMAGE),  # N and W: one range in neither order
        (lambda x: x.exp().mean((1, 3)), ((2, 8, 5, 6), torch.contiguous_format)),
    ],
    ids=["channels_last", "contiguous"],
)
def test_dims_apart_in_both_orders_stay_aten(fn: Any, image: Any) -> None:
    assert _reductions(fn, image) == []


@pytest.mark.parametrize(
    "fn, operand, mode",
    [
        # A batch norm's per-channel scale, beside a channels-last image.
        (lambda x, s: F.silu(x * s).mean((2, 3), keepdim=True), (8, 1, 1), "periodic"),
        # A gate per image and channel: rows of C, repeated over H and W.
        (lambda x, g: (x * g).sum((0, 2, 3)), (2, 8, 1, 1), "periodic_rows"),
    ],
    ids=["per_channel", "per_image_and_channel"],
)
def test_operands_that_repeat_in_the_walk_are_periodic(fn: Any, operand: Any, mode: str) -> None:
    """Note [Periodic operands in reductions]: the smaller operand of a
    prologue is read at i mod period in the fast variant, not Strided."""
    examples = [
        torch.empty(IMAGE[0]).contiguous(memory_format=CL),
        torch.empty(operand),
    ]
    kernels, _ = _kernels(_on_fake_cuda(fn, *examples), generated_kernels=True)
    (group,) = [k for k in kernels if k["kind"] == "reduction"]
    prologue = group["spec"].split("prologue:")[1].split("epilogue:")[0]
    assert mode in prologue and "strided" not in prologue, group["spec"]


def test_an_epilogue_operand_that_repeats_in_the_result_is_periodic() -> None:
    """The result [N, C] of a spatial sum plus a bias [C]: the bias repeats
    every C results (Note [Periodic operands in reductions], epilogue side)."""
    examples = [torch.empty(IMAGE[0]).contiguous(memory_format=CL), torch.empty(8)]
    fn = lambda x, b: x.exp().sum((2, 3)) + b  # noqa: E731
    kernels, _ = _kernels(_on_fake_cuda(fn, *examples), generated_kernels=True)
    (group,) = [k for k in kernels if k["kind"] == "reduction"]
    epilogue = group["spec"].split("epilogue:")[1]
    assert "periodic" in epilogue and "strided" not in epilogue, group["spec"]
