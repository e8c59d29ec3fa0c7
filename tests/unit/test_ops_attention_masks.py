"""Stage 1→2: SDPA masks whose last stride is not 1 are rewritten before
tracing (Note [Attention masks with a broadcast last dim])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mybackend.ops.attention_masks import rewrite_attention_masks
from tests.testing import compiled_through_rewrite

B, H, S, D = 2, 4, 16, 8


def _compiled(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[Any]]:
    """fn compiled through the rewrite alone; the list gets (count, graph)."""
    return compiled_through_rewrite(rewrite_attention_masks, fn)


def _qkv(requires_grad: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, S, D, generator=gen).requires_grad_(requires_grad) for _ in range(3)]


def _row_mask(kind: str) -> torch.Tensor:
    """[B, 1, S, S] constant along keys (strides (S, S, 1, 0)), some rows fully masked."""
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[0, -3:] = False
    if kind == "float":
        rows = torch.linspace(-2.0, 3.0, B * S).view(B, S)  # a different constant per row
        keep = rows.masked_fill(~keep, float("-inf"))
    return keep[:, None, :, None].expand(B, 1, S, S)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> Any:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _math(fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    """The math path: what aot_autograd traces for such a mask."""
    with sdpa_kernel([SDPBackend.MATH]):
        return fn(*inputs)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_mask_constant_along_keys_becomes_attention_without_a_mask(kind: str) -> None:
    """BERT's form under torch.compile; fully masked rows are zero, as the math path makes them."""
    mask = _row_mask(kind)
    assert mask.stride()[-1] == 0
    compiled, seen = _compiled(_attention)
    qkv = _qkv(requires_grad=True)
    out = compiled(*qkv, mask)
    [(count, gm)] = seen
    assert count == 1
    [sdpa] = [n for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention]
    assert sdpa.kwargs.get("attn_mask") is None and mask_free(sdpa)
    assert any(n.target is torch.where for n in gm.graph.nodes)
    expected = _math(_attention, *qkv, mask)
    torch.testing.assert_close(out, expected)
    assert out[0, :, -3:].abs().max() == 0  # the fully masked rows
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, qkv, grad)
    want = torch.autograd.grad(expected, qkv, grad)
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w)


def mask_free(node: torch.fx.Node) -> bool:
    return len(node.args) <= 3 or node.args[3] is None


def test_a_transposed_mask_is_copied_once_for_every_reader() -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> Any:
        mask = keep.transpose(-1, -2)  # last stride S
        first = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(first, k, v, mask)  # positional mask

    keep = torch.rand(B, 1, S, S, generator=torch.Generator().manual_seed(1)) > 0.2
    keep |= torch.eye(S, dtype=torch.bool)  # no fully masked row
    compiled, seen = _compiled(fn)
    qkv = _qkv()
    torch.testing.assert_close(compiled(*qkv, keep), fn(*qkv, keep))
    [(count, gm)] = seen
    assert count == 2
    dense = [n for n in gm.graph.nodes if n.op == "call_method" and n.target == "contiguous"]
    assert len(dense) == 1 and dense[0].meta["example_value"].stride()[-1] == 1
    sdpa = [n for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention]
    assert all(dense[0] in n.all_input_nodes for n in sdpa)


def test_dense_masks_single_keys_and_no_masks_are_left_alone() -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> Any:
        mask = keep[:, None, None, :].expand(B, 1, S, S)  # broadcast over queries: stride 1
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        single_key = F.scaled_dot_product_attention(
            q, k[:, :, :1], v[:, :, :1], attn_mask=keep[:, None, :, None].expand(B, 1, S, 1)
        )
        return a + b + single_key

    compiled, seen = _compiled(fn)
    compiled(*_qkv(), torch.ones(B, S, dtype=torch.bool))
    [(count, gm)] = seen
    assert count == 0
    assert not any(n.target in ("contiguous", torch.where) for n in gm.graph.nodes)


def test_a_mask_that_requires_grad_is_copied_not_dropped() -> None:
    """Its gradient must stay a tensor (zeros along a constant row), not None."""
    mask = torch.zeros(B, 1, S, 1).requires_grad_()
    compiled, seen = _compiled(lambda q, k, v, m: _attention(q, k, v, m.expand(B, 1, S, S)))
    qkv = _qkv()
    compiled(*qkv, mask).sum().backward()
    [(count, gm)] = seen
    assert count == 1
    assert any(n.op == "call_method" and n.target == "contiguous" for n in gm.graph.nodes)
    assert not any(n.target is torch.where for n in gm.graph.nodes)
    assert mask.grad is not None
