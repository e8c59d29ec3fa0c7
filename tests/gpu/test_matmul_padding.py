"""GPU-marked: misaligned 16-bit products run padded and match eager
(Note [Aligned matrix products] in mybackend/passes/matmul_padding.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

VOCAB, HIDDEN, TOKENS = 50257, 768, 2048


def _ir_ops(records: list[Any]) -> list[str]:
    return [n["op"] for r in records if r.core_report for n in r.core_report["nodes"]]


def _output_layer() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(HIDDEN, VOCAB, bias=False, device="cuda")


def test_output_layer_inference_is_padded_and_matches_eager() -> None:
    layer = _output_layer().to(torch.bfloat16)
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        out, records = compiled_records(lambda: compiled(x))
        expected = layer(x)
    # The weight's padding reads only a parameter: hoisted out of the graph,
    # which keeps the product and the slice back to 50257 columns.
    assert "aten::slice.Tensor" in _ir_ops(records)
    assert out.shape == expected.shape and out.stride() == (VOCAB + 7, 1)  # padded rows
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)


def test_output_layer_training_matches_eager() -> None:
    """Forward pads the weight; backward pads the gradient once for both products
    and reads the padded weight the forward saved."""
    layer = _output_layer()
    reference = _output_layer()
    x = torch.randn(TOKENS, HIDDEN, device="cuda", requires_grad=True)
    target = torch.randint(0, VOCAB, (TOKENS,), device="cuda")

    def step(module: Any) -> list[torch.Tensor]:
        x.grad = None
        module.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(module(x).float(), target)
        loss.backward()
        return [loss.detach(), x.grad.clone(), next(module.parameters()).grad.clone()]  # type: ignore[union-attr]

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: step(compiled))
    want = step(reference)
    # Padded on the joint graph: the forward pads W, the backward pads g and
    # reads W's padded copy saved by the forward.
    for kind, pads in (("forward", 1), ("backward", 1)):
        ops = _ir_ops([r for r in records if r.kind == kind])
        assert ops.count("aten::constant_pad_nd.default") == pads, (kind, ops)
    (backward,) = [r.gm for r in records if r.kind == "backward"]
    saved = [n.meta["val"] for n in backward.graph.find_nodes(op="placeholder")]
    assert any(v.dim() == 2 and v.shape[0] == VOCAB + 7 for v in saved), saved
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-2, rtol=2e-2)
