"""GPU-marked: reductions whose rows' elementwise readers run in the same
kernel (Note [Row epilogues] in src_cpp/spec/kernel_spec.h), against eager.

Each case is a row reduction read back broadcast over its rows: autograd's
RMS-norm backward, a hand-written softmax, L2 normalization and centering.
The plan must carry a row epilogue and the generated kernel must have run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.gpu.test_fused_reductions import BF16, F32, TOL_SUM, _check, _randn

pytestmark = [
    pytest.mark.gpu,
]

# Warp per row (<= 256), block per row, whole vectors or not.
ROW_LENGTHS = [7, 64, 256, 1000, 1024, 4096]


def _rms_backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor) -> Any:
    """The input gradient autograd derives for y = (x * rstd) * w, written as
    its graph computes it (fp32 x and weight, dy in the activations' dtype)."""
    g = dy.float()
    gw = g * w
    s = (gw * x).sum(-1, keepdim=True)
    scaled = (s * -0.5) * rstd.pow(3)
    grad = gw * rstd + scaled.expand_as(x) / x.shape[-1] * (x * 2.0)
    return grad.to(dy.dtype)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    """Two reductions, each with its row epilogue: exp(x - max), then / sum."""
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


ROWS: dict[str, Callable[..., Any]] = {
    "softmax": _softmax,
    "l2_normalize": lambda x: x / (x * x).sum(-1, keepdim=True).sqrt().clamp_min(1e-6),
    "center": lambda x: (x - x.mean(-1, keepdim=True)) * 2,
}


def _has_row_epilogue(compiled: Any) -> bool:
    return any("row epilogue" in k.get("spec", "") for k in compiled.report()["kernels"])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("cols", ROW_LENGTHS)
def test_rms_norm_input_gradient_is_one_kernel(cols: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    dy, x = _randn(5, 3, cols, dtype=dtype), _randn(5, 3, cols)
    rstd, w = _randn(5, 3, 1).abs() + 0.5, _randn(cols)
    compiled = _check(_rms_backward, dy, x, rstd, w, kind="reduction", tol=TOL_SUM[dtype])
    assert _has_row_epilogue(compiled), compiled.report()["kernels"]
    kinds = [k["kind"] for k in compiled.report()["kernels"]]
    assert "pointwise" not in kinds or kinds.count("pointwise") == 1, kinds  # dy's upcast alone


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("cols", ROW_LENGTHS)
@pytest.mark.parametrize("name", list(ROWS))
def test_rows_read_back_their_reduction(name: str, cols: int, dtype: torch.dtype) -> None:
    x = _randn(6, cols, dtype=dtype)
    compiled = _check(ROWS[name], x, kind="reduction", tol=TOL_SUM[dtype])
    assert _has_row_epilogue(compiled), compiled.report()["kernels"]


def test_rows_of_a_slice_read_through_strides() -> None:
    """Rows 96 apart (a slice): read through strides, not as dense vectors.
    (A transposed input is no row reduction: its reduced dim is outermost in
    memory, Note [Reductions walked in memory order].)"""
    x = _randn(64, 96)[:, :48]
    compiled = _check(ROWS["center"], x, kind="reduction", tol=TOL_SUM[F32])
    assert _has_row_epilogue(compiled)


def test_an_rms_norm_trains_through_torch_compile() -> None:
    """A hand-written (HF-style) RMS norm under bf16 autocast: the backward's
    row sum and input gradient are one kernel and the gradients are eager's."""
    torch.manual_seed(0)
    hidden = 1024

    class RmsNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden, device="cuda"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return self.weight * h.to(x.dtype)

    norm = RmsNorm()
    proj = torch.nn.Linear(hidden, hidden, device="cuda")
    inp = torch.randn(8, 128, hidden, device="cuda", requires_grad=True)

    def step(fn: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        for t in (inp, norm.weight, proj.weight):
            t.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fn(inp).float().square().mean().backward()
        return [t.grad.clone() for t in (inp, norm.weight, proj.weight)]

    def model(x: torch.Tensor) -> torch.Tensor:
        return proj(norm(x)) + x

    from tests.testing import compiled_records

    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: step(compiled))
    want = step(model)
    for a, e in zip(got, want, strict=True):
        assert ((a.float() - e.float()).norm() / e.float().norm()).item() < 1e-2
    (backward,) = [r for r in records if r.kind == "backward"]
    assert _has_row_epilogue(backward.compiled), backward.compiled.report()["kernels"]
    assert backward.compiled.stats()["generated_kernel_fallbacks"] == 0
