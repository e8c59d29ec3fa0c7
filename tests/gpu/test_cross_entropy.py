"""GPU-marked: the generated cross-entropy kernels (Note [Fused
cross-entropy], device/mb_cross_entropy.cuh) against the ops' ATen
implementations, and a language-model head trained through the backend
against eager.

Each op test compiles the op alone, runs it, and checks generated_norms_run
to prove the generated kernel ran, not the ATen implementation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import mybackend
from mybackend.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
from tests.testing import compiled_records, run_generated_norm

pytestmark = [pytest.mark.gpu]

IGNORE = -100
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# fp32 sums of up to 50257 exps in another order than logsumexp's.
TOL = {"rtol": 2e-5, "atol": 2e-5}
GRAD_TOL = {F32: TOL, F16: {"rtol": 2e-3, "atol": 1e-5}, BF16: {"rtol": 1.6e-2, "atol": 1e-5}}


def _logits(rows: int, cols: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """[rows, cols] logits: contiguous, rows padded to a multiple of 8
    (the padded output layer), or starting one element off alignment."""
    width = {"contiguous": cols, "padded": (cols + 7) // 8 * 8, "offset": cols + 1}[layout]
    base = torch.randn(rows, width, device="cuda", dtype=torch.float32) * 4
    base = base.to(dtype)
    return base[:, 1 : cols + 1] if layout == "offset" else base[:, :cols]


def _targets(rows: int, cols: int) -> torch.Tensor:
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[::5] = IGNORE
    if rows > 1:
        target[1] = cols - 1  # the last class, in the row's tail
    if rows > 2:
        target[2] = 0
    return target


SHAPES = [(1, 1), (3, 7), (33, 1000), (128, 4099), (64, 50257)]


@pytest.mark.parametrize("dtype", [BF16, F16, F32])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("layout", ["contiguous", "padded", "offset"])
def test_forward_and_backward_kernels(
    dtype: torch.dtype, shape: tuple[int, int], layout: str
) -> None:
    rows, cols = shape
    x, target = _logits(rows, cols, dtype, layout), _targets(rows, cols)
    ops = torch.ops.mybackend

    loss, lse = run_generated_norm(lambda x, t: ops.cross_entropy_forward(x, t, IGNORE), x, target)
    want_loss, want_lse = cross_entropy_forward(x, target, IGNORE)
    torch.testing.assert_close(lse, want_lse, **TOL)
    torch.testing.assert_close(loss, want_loss, **TOL)

    grad_loss = torch.rand(rows, device="cuda")
    (grad,) = run_generated_norm(
        lambda g, x, t, s: ops.cross_entropy_backward(g, x, t, s, IGNORE), grad_loss, x, target, lse
    )
    want = cross_entropy_backward(grad_loss, x, target, want_lse, IGNORE)
    assert grad.dtype == dtype and grad.is_contiguous()
    torch.testing.assert_close(grad, want, **GRAD_TOL[dtype])
    assert (grad[target == IGNORE] == 0).all()


@pytest.mark.parametrize("dtype", [BF16, F32])
@pytest.mark.parametrize("shape", [(3, 7), (64, 50257)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_backward_kernel_writes_padded_rows(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    """Note [Padded cross-entropy gradient]: each row, then `pad` zeros."""
    rows, cols = shape
    pad = 8 - cols % 8 if cols % 8 else 8
    x, target = _logits(rows, cols, dtype, "padded"), _targets(rows, cols)
    lse = torch.logsumexp(x.float(), dim=1)
    grad_loss = torch.rand(rows, device="cuda")
    # A freed block of NaNs, which the caching allocator hands to the
    # gradient: the padding is written, not left as the block was.
    torch.full((rows, cols + pad), float("nan"), device="cuda", dtype=dtype)
    ops = torch.ops.mybackend
    (grad,) = run_generated_norm(
        lambda g, x, t, s: ops.cross_entropy_backward(g, x, t, s, IGNORE, pad),
        grad_loss,
        x,
        target,
        lse,
    )
    want = cross_entropy_backward(grad_loss, x, target, lse, IGNORE)
    assert grad.shape == (rows, cols + pad) and grad.is_contiguous()
    torch.testing.assert_close(grad[:, :cols], want, **GRAD_TOL[dtype])
    assert (grad[:, cols:] == 0).all()


def test_out_of_range_target_gives_nan_not_a_crash() -> None:
    x, target = _logits(4, 10, F32, "contiguous"), torch.tensor([1, 10, -3, 2], device="cuda")
    loss, _ = run_generated_norm(
        lambda x, t: torch.ops.mybackend.cross_entropy_forward(x, t, IGNORE), x, target
    )
    assert loss[1].isnan() and loss[2].isnan() and not loss[0].isnan() and not loss[3].isnan()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_language_model_head_trains_like_eager(reduction: str) -> None:
    # GPT-2's output layer: 50257 classes (the padded product) under autocast.
    torch.manual_seed(0)
    head = torch.nn.Linear(64, 50257, bias=False, device="cuda")
    hidden = torch.randn(4, 32, 64, device="cuda", requires_grad=True)
    target = torch.randint(0, 50257, (4, 32), device="cuda")
    target[0, :5] = IGNORE

    def step(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h)
        return F.cross_entropy(logits.flatten(0, -2), t.flatten(), reduction=reduction)

    def run(fn: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
        head.weight.grad, hidden.grad = None, None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn(hidden, target)
        loss.backward()
        return [loss.detach(), head.weight.grad.clone(), hidden.grad.clone()]

    torch._dynamo.reset()
    expected = run(step)
    compiled = torch.compile(step, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: run(compiled))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-3)

    report = mybackend.explain(step, hidden, target)
    forward = report.graphs[0]
    assert "mybackend::cross_entropy_forward.default" in forward.ir_text
    assert "_log_softmax" not in forward.ir_text
    # Note [Padded cross-entropy gradient]: the backward's product reads the
    # gradient kernel's padded rows, not a constant_pad_nd copy of them.
    backward = [r for r in records if "cross_entropy_backward" in r.ir_text]
    assert backward, [r.kind for r in records]
    assert "constant_pad_nd" not in backward[0].ir_text
