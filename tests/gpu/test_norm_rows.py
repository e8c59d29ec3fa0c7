"""GPU-marked: row-wise norm kernels on rows that are not whole 16-byte
vectors (Note [Scalar rows in registers] in device/mb_norm.cuh): a 7x7
window's 49 attention scores, ViT's 197 tokens, many rows to a block.

Each op is compiled alone and must run as the generated norm kernel
(run_generated_norm checks generated_norms_run); its result is compared
with the op computed in fp64.
"""

from __future__ import annotations

import pytest
import torch

from tests.testing import run_generated_norm

pytestmark = [pytest.mark.gpu]

BF16, F32 = torch.bfloat16, torch.float32
TOL = {BF16: {"rtol": 2e-2, "atol": 2e-2}, F32: {"rtol": 1e-4, "atol": 1e-5}}
# Rows of a window-attention block at batch 4 (4 * 64 windows * 3 heads * 49
# queries), a ViT-B/16 image's tokens, a whole-vector length beside them.
SHAPES = [(37632, 49), (6 * 197, 197), (301, 48), (257, 513)]


def _x(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(shape, device="cuda") * 3).to(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [BF16, F32])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward(shape: tuple[int, int], dtype: torch.dtype, log: bool) -> None:
    op = torch.ops.aten._log_softmax.default if log else torch.ops.aten._softmax.default
    x = _x(shape, dtype)
    (y,) = run_generated_norm(lambda t: op(t, -1, False), x)
    torch.testing.assert_close(y, op(x.double(), -1, False).to(dtype), **TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_softmax_backward(shape: tuple[int, int], dtype: torch.dtype) -> None:
    op = torch.ops.aten._softmax_backward_data.default
    y = torch.softmax(_x(shape, F32), -1).to(dtype)
    g = _x(shape, dtype)
    (gx,) = run_generated_norm(lambda gy, out: op(gy, out, -1, dtype), g, y)
    want = op(g.double(), y.double(), -1, torch.float64).to(dtype)
    torch.testing.assert_close(gx, want, **TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_layer_norm_forward_and_backward(shape: tuple[int, int], dtype: torch.dtype) -> None:
    cols = shape[1]
    x = _x(shape, dtype)
    w = (torch.rand(cols, device="cuda") + 0.5).to(dtype)
    b = torch.randn(cols, device="cuda").to(dtype)
    forward = torch.ops.aten.native_layer_norm.default
    y, mean, rstd = run_generated_norm(lambda t, wt, bt: forward(t, [cols], wt, bt, 1e-5), x, w, b)
    want = forward(x.double(), [cols], w.double(), b.double(), 1e-5)
    torch.testing.assert_close(y, want[0].to(dtype), **TOL[dtype])
    torch.testing.assert_close(rstd.double(), want[2], rtol=1e-3, atol=1e-3)
    backward = torch.ops.aten.native_layer_norm_backward.default
    g = _x(shape, dtype)

    def grads(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gy, t, m, r, wt, bt = args
        return backward(gy, t, [cols], m, r, wt, bt, [True, False, False])[:1]

    (gx,) = run_generated_norm(grads, g, x, mean, rstd, w, b)
    doubled = [v.double() for v in (g, x)]
    want_gx = backward(*doubled, [cols], want[1], want[2], w.double(), b.double(), [True] * 3)[0]
    torch.testing.assert_close(gx, want_gx.to(dtype), **TOL[dtype])
