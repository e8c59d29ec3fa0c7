"""mybackend/passes/permuted_cats.py: a contiguous copy of a permuted concatenation
becomes one concatenation of permuted views (Note [Permuted concatenations])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from mybackend.passes.permuted_cats import write_permuted_cats
from tests.testing import (
    assert_same_result,
    call_targets,
    compiled_records,
    traced_and_rewritten,
    use_cuda_decompositions,
)

aten = torch.ops.aten
B, H, N, D = 2, 3, 5, 4


def _rewritten(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> tuple[Any, Any, int]:
    return traced_and_rewritten(write_permuted_cats, fn, *inputs)


def _attention_gradients_into_the_projection(
    dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor
) -> torch.Tensor:
    """What aot_autograd traces for the backward of a ViT's
    qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)."""
    stacked = torch.cat([dq, dk, dv]).view(3, B, H, N, D)
    moved = stacked.permute(1, 3, 0, 2, 4).clone(memory_format=torch.contiguous_format)
    return moved.view(B * N, 3 * H * D)


def test_a_stack_permuted_into_place_is_one_concatenation() -> None:
    inputs = tuple(torch.randn(B, H, N, D) for _ in range(3))
    before, after, count = _rewritten(_attention_gradients_into_the_projection, *inputs)
    assert count == 1
    assert aten.clone.default not in call_targets(after)
    assert call_targets(after).count(aten.cat.default) == 1
    (cat,) = after.graph.find_nodes(op="call_function", target=aten.cat.default)
    assert cat.args[1] == 2  # the stacked dim lands at 2 of [B, N, 3, H, D]
    assert cat.meta["val"].shape == (B, N, 3, H, D) and cat.meta["val"].is_contiguous()
    assert_same_result(before, after, inputs)


def test_a_permuted_concatenation_along_any_dim() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (
            torch.cat([a, b], dim=-1).permute(2, 0, 1).clone(memory_format=torch.contiguous_format)
        )

    inputs = (
        torch.randn(2, 3, 4),
        torch.randn(2, 3, 5).transpose(0, 1).contiguous().transpose(0, 1),
    )
    before, after, count = _rewritten(fn, *inputs)
    assert count == 1 and aten.clone.default not in call_targets(after)
    (cat,) = after.graph.find_nodes(op="call_function", target=aten.cat.default)
    assert cat.args[1] == 0
    assert_same_result(before, after, inputs)


def test_copies_that_keep_strides_or_share_their_source_are_left_alone() -> None:
    def preserved(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # clone() keeps the permuted strides: no concatenation writes those.
        return torch.cat([a, b]).permute(1, 0).clone()

    def shared(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cat = torch.cat([a, b])
        return cat.permute(1, 0).clone(memory_format=torch.contiguous_format), cat * 2

    def uneven_stack(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # Parts of two shapes viewed as [2, 3, 6]: no stack.
        moved = torch.cat([a, b]).view(2, 3, 6).permute(1, 0, 2)
        return moved.clone(memory_format=torch.contiguous_format)

    inputs = (torch.randn(3, 4), torch.randn(3, 4))
    for fn in (preserved, shared):
        _, after, count = _rewritten(fn, *inputs)
        assert count == 0 and aten.clone.default in call_targets(after), fn.__name__
    _, after, count = _rewritten(uneven_stack, torch.randn(2, 6), torch.randn(4, 6))
    assert count == 0 and aten.clone.default in call_targets(after)


class _Attention(nn.Module):
    """timm's ViT attention: one qkv projection split into heads by a permute."""

    def __init__(self, dim: int = 12, heads: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


def test_the_attention_backward_writes_the_projection_gradient_in_one_concatenation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pattern is a CUDA graph's (stack decomposed into cat): CPU graphs keep
    # ATen's ops whole (Note [Eager's kernels on the CPU]), so take CUDA's table.
    use_cuda_decompositions(monkeypatch)
    torch.manual_seed(0)
    eager = _Attention()
    model = _Attention()
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = torch.randn(2, 5, 12)

    def step(m: nn.Module) -> list[torch.Tensor]:
        xi = x.clone().requires_grad_()
        m(xi).square().sum().backward()
        return [xi.grad, *(p.grad for p in m.parameters())]

    want = step(eager)
    got, records = compiled_records(lambda: step(compiled))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    (backward,) = [r for r in records if r.kind == "backward"]
    cats = backward.gm.graph.find_nodes(op="call_function", target=aten.cat.default)
    assert len(cats) == 1 and cats[0].meta["val"].dim() == 5, backward.gm.code
    clones = backward.gm.graph.find_nodes(op="call_function", target=aten.clone.default)
    assert not [c for c in clones if c.args[0].target is aten.permute.default], backward.gm.code
