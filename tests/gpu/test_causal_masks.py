"""GPU-marked: a decoder's constant causal mask reaches a causal fused kernel
(Note [Constant causal masks] in mybackend/ops/causal_masks.py).

With the mask, aot_autograd traces the memory-efficient kernel reading a
dense [B, 1, S, S] mask; as ``is_causal`` it traces the flash (or cuDNN)
kernel and no mask. The tests assert which op the compiled graphs hold and
that outputs and gradients match eager's with the mask.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

B, H, S, D = 4, 8, 256, 64


def _decoder_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # As transformers' create_causal_mask builds it under torch.compile.
    rows = torch.arange(S, device=q.device)[None, None, :, None]
    cols = torch.arange(S, device=q.device)[None, None, None, :]
    mask = (cols <= rows).expand(q.shape[0], 1, S, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(requires_grad: bool) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    return [
        torch.randn(B, H, S, D, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_(
            requires_grad
        )
        for _ in range(3)
    ]


def _attention_calls(records: list[Any]) -> list[dict[str, Any]]:
    """The arguments, by schema name, of each forward SDPA op the compiled
    ATen graphs call (flash, memory-efficient or cuDNN, as aot_autograd chose)."""
    calls = []
    for record in records:
        for node in record.gm.graph.nodes:
            schema = getattr(node.target, "_schema", None)
            name = getattr(schema, "name", "")
            if "scaled_dot_product" not in name or name.endswith("_backward"):
                continue
            names = [a.name for a in schema.arguments]
            calls.append({**dict(zip(names, node.args, strict=False)), **node.kwargs})
    return calls


@pytest.mark.parametrize("options", [{}, {"disabled_passes": ("causal_masks",)}], ids=["on", "off"])
def test_forward_and_backward_run_a_causal_kernel(options: dict[str, Any]) -> None:
    inputs = _inputs(requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(
        _decoder_attention, backend="mybackend", options={"strict": True, **options}
    )

    def step() -> torch.Tensor:
        out = compiled(*inputs)
        out.float().square().sum().backward()
        return out

    out, records = compiled_records(step)
    got = [t.grad.clone() for t in inputs]  # type: ignore[union-attr]
    for t in inputs:
        t.grad = None
    expected = _decoder_attention(*inputs)
    expected.float().square().sum().backward()
    calls = _attention_calls(records)
    assert calls
    # With the pass: causal, no mask; switched off, the mask is the kernel's bias.
    causal = not options
    for call in calls:
        assert bool(call.get("is_causal")) is causal, call
        assert (call.get("attn_bias") is None) is causal, call
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    for mine, eager in zip(got, [t.grad for t in inputs], strict=True):
        torch.testing.assert_close(mine, eager, atol=5e-2, rtol=5e-2)
