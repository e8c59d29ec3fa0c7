"""Stage 1→2: constant causal masks become ``is_causal`` before tracing
(Note [Constant causal masks])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from mybackend.ops import causal_masks
from mybackend.ops.causal_masks import rewrite_causal_masks
from mybackend.passes import pipeline
from tests.testing import compiled_through_rewrite

B, H, S, D = 2, 4, 16, 8
SDPA = torch._C._nn.scaled_dot_product_attention


def _compiled(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[Any]]:
    """fn compiled through the rewrite alone; the list gets (count, graph)."""
    return compiled_through_rewrite(rewrite_causal_masks, fn)


def _rewritten(fn: Callable[..., Any], *inputs: torch.Tensor) -> tuple[int, torch.fx.GraphModule]:
    """The rewrite's count and graph for fn, whose compiled result equals eager's."""
    compiled, seen = _compiled(fn)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))
    return seen[0]


def _qkv(rows: int = S, keys: int = S, requires_grad: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(B, H, rows, D), (B, H, keys, D), (B, H, keys, D)]
    return [torch.randn(*s, generator=gen).requires_grad_(requires_grad) for s in shapes]


def _arange_mask(rows: int, keys: int, window: int | None = None) -> torch.Tensor:
    """transformers' way: query and key positions from aranges, compared."""
    q = torch.arange(rows)[None, None, :, None]
    k = torch.arange(keys)[None, None, None, :]
    keep = k <= q
    if window is not None:
        keep = keep & (q - k < window)
    return keep.expand(B, 1, rows, keys)


def _sdpa_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="call_function", target=SDPA))


def _bool_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_arange_mask(S, S))


def _float_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    keep = _arange_mask(S, S)
    lowest = torch.finfo(q.dtype).min
    mask = torch.zeros(keep.shape).masked_fill(~keep, lowest)
    return F.scaled_dot_product_attention(q, k, v, mask)  # the mask positional


@pytest.mark.parametrize("fn", [_bool_causal, _float_causal], ids=["bool", "float"])
def test_a_constant_causal_mask_becomes_is_causal(fn: Callable[..., Any]) -> None:
    count, gm = _rewritten(fn, *_qkv())
    assert count == 1
    (call,) = _sdpa_calls(gm)
    assert call.kwargs.get("is_causal") is True
    assert all(a is None for a in call.args[3:4]) and call.kwargs.get("attn_mask") is None
    # Nothing computes the mask any more.
    assert not list(gm.graph.find_nodes(op="call_function", target=torch.arange))


def test_the_gradients_are_those_of_the_masked_call() -> None:
    compiled, seen = _compiled(_bool_causal)
    inputs = _qkv(requires_grad=True)
    compiled(*inputs).sum().backward()
    got = [t.grad.clone() for t in inputs]  # type: ignore[union-attr]
    for t in inputs:
        t.grad = None
    _bool_causal(*inputs).sum().backward()
    for mine, eager in zip(got, [t.grad for t in inputs], strict=True):
        torch.testing.assert_close(mine, eager)
    assert seen[0][0] == 1


def test_one_mask_read_by_several_calls_is_computed_once_and_dropped() -> None:
    def two_layers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = _arange_mask(S, S)
        first = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(first, k, v, attn_mask=mask)

    assert _rewritten(two_layers, *_qkv())[0] == 2


def _window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A sliding window shorter than the sequence: constant, not causal."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_arange_mask(S, S, window=4))


def _from_input(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A causal mask that depends on an input: its value is not known."""
    keep = _arange_mask(S, S) & (q[:, :1, :, :1] == q[:, :1, :, :1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _random(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal in value (rand < 2 is always true), but made of a random number."""
    keep = _arange_mask(S, S) & (torch.rand(()) < 2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _upper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The transposed pattern (j >= i): constant, not causal."""
    keep = _arange_mask(S, S).transpose(-1, -2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _mild_float(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Masked entries of -10: softmax still weighs them, so it is not causal."""
    mask = torch.zeros(B, 1, S, S).masked_fill(~_arange_mask(S, S), -10.0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(
    "fn", [_window, _from_input, _random, _upper, _mild_float],
    ids=["window", "from-input", "random", "upper", "mild-float"],
)  # fmt: skip
def test_other_masks_are_kept(fn: Callable[..., Any]) -> None:
    count, gm = _rewritten(fn, *_qkv())
    assert count == 0
    (call,) = _sdpa_calls(gm)
    assert isinstance(call.kwargs.get("attn_mask", call.args[3] if len(call.args) > 3 else None),
                      torch.fx.Node)  # fmt: skip


def test_fewer_queries_than_keys_keep_their_mask() -> None:
    # is_causal is aligned top-left; a decoding step's mask is bottom-right.
    def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=_arange_mask(4, S))

    assert _rewritten(decode, *_qkv(rows=4))[0] == 0


def test_a_mask_over_the_size_limit_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(causal_masks, "MAX_MASK_ELEMENTS", B * S * S - 1)
    compiled, seen = _compiled(_bool_causal)
    compiled(*_qkv())
    assert seen[0][0] == 0


@pytest.mark.parametrize("disabled", [False, True])
def test_through_mybackend_and_switched_off(
    disabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts: list[int] = []

    def counted(gm: torch.fx.GraphModule, **kwargs: Any) -> int:
        counts.append(rewrite_causal_masks(gm, **kwargs))
        return counts[-1]

    monkeypatch.setattr(pipeline, "rewrite_causal_masks", counted)
    options: dict[str, Any] = {"strict": True}
    if disabled:
        options["disabled_passes"] = ("causal_masks",)
    torch._dynamo.reset()
    compiled = torch.compile(_bool_causal, backend="mybackend", options=options)
    inputs = _qkv(requires_grad=True)
    out = compiled(*inputs)
    torch.testing.assert_close(out, _bool_causal(*inputs))
    out.sum().backward()
    assert counts == ([] if disabled else [1])
