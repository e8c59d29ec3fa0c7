"""GPU-marked: an SDPA mask broadcast over keys still reaches a fused kernel
(Note [Attention masks with a broadcast last dim] in mybackend/ops/attention_masks.py).

Without the dense copy, aot_autograd traces such a call as the math path:
fp32 bmm, ``_safe_softmax``, bmm. These tests assert the compiled graphs
hold a fused SDPA op instead, forward and backward, and that the results
match eager's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

MATH_PATH_OPS = {"aten::_safe_softmax.default", "aten::bmm.default", "aten::_softmax.default"}


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> Any:
    # As transformers builds BERT's mask under torch.compile: [B, 1, S, S], strides (0, S, 1, 0).
    mask = keep[:, None, :, None].expand(q.shape[0], 1, q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(requires_grad: bool) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = [
        torch.randn(
            4, 12, 128, 64, device="cuda", generator=gen, dtype=torch.bfloat16
        ).requires_grad_(requires_grad)
        for _ in range(3)
    ]
    keep = torch.ones(4, 128, device="cuda", dtype=torch.bool)
    keep[1, 100:] = False
    return [*qkv, keep]


def _ops(records: list[Any]) -> set[str]:
    return {n["op"] for r in records if r.core_report for n in r.core_report["nodes"]}


def test_inference_runs_a_fused_kernel_not_the_math_path() -> None:
    inputs = _inputs(requires_grad=False)
    torch._dynamo.reset()
    compiled = torch.compile(_attention, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        out, records = compiled_records(lambda: compiled(*inputs))
        expected = _attention(*inputs)
    ops = _ops(records)
    assert ops and not ops & MATH_PATH_OPS, sorted(ops)
    assert any("scaled_dot_product" in op for op in ops), sorted(ops)
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)


def test_training_runs_fused_kernels_forward_and_backward() -> None:
    inputs = _inputs(requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(_attention, backend="mybackend", options={"strict": True})
    grad = torch.randn(4, 12, 128, 64, device="cuda", dtype=torch.bfloat16)

    def step(fn: Any) -> list[torch.Tensor]:
        for t in inputs[:3]:
            t.grad = None
        fn(*inputs).backward(grad)
        return [t.grad.clone() for t in inputs[:3]]  # type: ignore[union-attr]

    grads, records = compiled_records(lambda: step(compiled))
    expected = step(_attention)
    ops = _ops(records)
    assert not ops & MATH_PATH_OPS, sorted(ops)
    assert any("scaled_dot_product" in op and "backward" in op for op in ops), sorted(ops)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
