"""GPU-marked: F.interpolate kept whole on CUDA (Note [Resampling kept whole]
in mybackend/ops/interpolate.py).

A UNet decoder block (convolution, group norm, SiLU, upsampling, concatenation
with a skip connection, convolution) compiled in strict mode, in both modes,
fp32 and bf16, for each resampling mode a decoder uses. The planned graph
must run the upsampling as mybackend::interpolate (no gathers left), and the
results must be as close to a float64 reference as eager's are; trained,
the block's backward runs mybackend::interpolate_backward and its gradients
match eager's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.testing import compiled_records, error_ratio_check

pytestmark = pytest.mark.gpu

WHOLE = torch.ops.mybackend.interpolate.default
BACKWARD = torch.ops.mybackend.interpolate_backward.default
GATHERS = {torch.ops.aten._unsafe_index.Tensor, torch.ops.aten.index.Tensor}
CALLS = 3  # reduce-overhead: warm-up, capture, replay


class DecoderBlock(nn.Module):
    def __init__(self, mode: str, align_corners: bool | None) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(8, 16, 3, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.conv_out = nn.Conv2d(24, 8, 3, padding=1)
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.norm(self.conv_in(x)))
        up = F.interpolate(h, scale_factor=2, mode=self.mode, align_corners=self.align_corners)
        return self.conv_out(torch.cat([up, skip], dim=1))


RESAMPLING = {
    "bilinear": ("bilinear", False),
    "bilinear-corners": ("bilinear", True),
    "nearest": ("nearest", None),
    "bicubic": ("bicubic", False),
}


@pytest.fixture(autouse=True)
def _no_tf32() -> Iterator[None]:
    # fp32 convolutions in full precision on both sides: the checks compare errors.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        yield


def _targets(records: list[Any]) -> set[Any]:
    return {n.target for r in records if r.gm is not None for n in r.gm.graph.nodes}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("resampling", list(RESAMPLING))
def test_a_decoder_block_upsamples_whole(resampling: str, mode: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    eager = DecoderBlock(*RESAMPLING[resampling]).cuda().to(dtype).eval()
    reference = copy.deepcopy(eager).double()
    options = {"strict": True, "cuda_graphs": mode == "reduce-overhead"}
    compiled = torch.compile(copy.deepcopy(eager), backend="mybackend", options=options)
    targets: set[Any] = set()
    with torch.no_grad():
        for _ in range(CALLS):
            x = torch.randn(2, 8, 16, 16, device="cuda", dtype=dtype)
            skip = torch.randn(2, 8, 32, 32, device="cuda", dtype=dtype)
            got, records = compiled_records(lambda x=x, skip=skip: compiled(x, skip))
            targets |= _targets(records)
            error_ratio_check(
                got, lambda x=x, skip=skip: reference(x.double(), skip.double()), eager(x, skip)
            )
    assert WHOLE in targets and not targets & GATHERS, targets


@pytest.mark.parametrize("resampling", list(RESAMPLING))
def test_a_decoder_block_trains_whole(resampling: str) -> None:
    torch.manual_seed(0)
    eager = DecoderBlock(*RESAMPLING[resampling]).cuda()
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, backend="mybackend", options={"strict": True})
    x = torch.randn(2, 8, 16, 16, device="cuda")
    skip = torch.randn(2, 8, 32, 32, device="cuda")

    def step() -> None:
        compiled(x, skip).square().mean().backward()

    reference = copy.deepcopy(eager).double()
    _, records = compiled_records(step)
    eager(x, skip).square().mean().backward()
    reference(x.double(), skip.double()).square().mean().backward()
    targets = _targets(records)
    assert {WHOLE, BACKWARD} <= targets and not targets & GATHERS, targets
    for mine, theirs, exact in zip(
        compiled_module.parameters(), eager.parameters(), reference.parameters(), strict=True
    ):
        error_ratio_check(mine.grad, lambda exact=exact: exact.grad, theirs.grad)
