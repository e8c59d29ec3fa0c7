"""Stage 3: a sum of a tensor and a scatter into zeros becomes one scatter
into the tensor (Note [Scatters into their addend])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.passes.scatter_adds import fold_scatter_adds
from tests.testing import compiled_records

aten = torch.ops.aten
VOCAB, DIM, TOKENS = 11, 4, 9


def _scatter(values: torch.Tensor, index: torch.Tensor, fill: float = 0) -> torch.Tensor:
    zeros = aten.full.default([VOCAB, DIM], fill, dtype=values.dtype)
    return aten.index_put.default(zeros, [index], values, True)


def _lookup_gradient(
    values: torch.Tensor, index: torch.Tensor, padding_idx: int = -1, by_freq: bool = False
) -> torch.Tensor:
    """The lookup's gradient as the decomposition table leaves it: whole
    (Note [Embedding gradients stay whole])."""
    return aten.embedding_dense_backward.default(values, index, VOCAB, padding_idx, by_freq)


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    index = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    index[1] = index[0]  # a row hit twice
    return [torch.randn(VOCAB, DIM, generator=gen), index, torch.randn(TOKENS, DIM, generator=gen)]


def _read_twice(a: torch.Tensor, scattered: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return a + scattered, scattered.sum()


def _targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, i, v: a + _scatter(v, i),
        lambda a, i, v: _scatter(v, i) + a,
        lambda a, i, v: a + _lookup_gradient(v, i),
        lambda a, i, v: _lookup_gradient(v, i) + a,
    ],
    ids=["addend-first", "scatter-first", "lookup-gradient-second", "lookup-gradient-first"],
)
def test_the_scatter_accumulates_into_the_addend(fn: Callable[..., torch.Tensor]) -> None:
    inputs = _inputs()
    gm = make_fx(fn)(*inputs)
    expected = gm(*inputs)
    assert fold_scatter_adds(gm) == 1
    assert _targets(gm) == [aten.index_put.default]
    [scatter] = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert scatter.args[0].op == "placeholder" and scatter.args[3] is True
    torch.testing.assert_close(gm(*inputs), expected)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, i, v: a + _scatter(v, i, fill=1),  # not zeros
        lambda a, i, v: a + aten.index_put.default(torch.zeros_like(a), [i], v, False),
        lambda a, i, v: a[0] + _scatter(v, i),  # the add broadcasts
        lambda a, i, v: a.double() + _scatter(v, i),  # the add promotes
        lambda a, i, v: torch.add(a, _scatter(v, i), alpha=2),
        lambda a, i, v: _read_twice(a, _scatter(v, i)),
        lambda a, i, v: a + _lookup_gradient(v, i, padding_idx=3),
        lambda a, i, v: a + _lookup_gradient(v, i, by_freq=True),
        lambda a, i, v: _read_twice(a, _lookup_gradient(v, i)),
    ],
    ids=[
        "ones",
        "not-accumulating",
        "broadcast",
        "promotes",
        "alpha",
        "scatter-read-twice",
        "lookup-gradient-with-padding",
        "lookup-gradient-by-frequency",
        "lookup-gradient-read-twice",
    ],
)
def test_other_sums_are_left_alone(fn: Callable[..., Any]) -> None:
    gm = make_fx(fn)(*_inputs())
    before = _targets(gm)
    assert fold_scatter_adds(gm) == 0
    assert _targets(gm) == before


def _upcast_plus_scatter(a: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Autocast's shape of GPT-2's tied gradient: the product's gradient
    cast to f32 (a tensor of the graph's own) plus the lookup's scatter."""
    return a.to(torch.bfloat16).float() + _scatter(v, i)


def test_a_fresh_addend_read_once_takes_the_scatter_in_place() -> None:
    inputs = _inputs()
    gm = make_fx(_upcast_plus_scatter)(*inputs)
    expected = gm(*inputs)
    assert fold_scatter_adds(gm) == 1
    assert aten.index_put_.default in _targets(gm)
    torch.testing.assert_close(gm(*inputs), expected)


def test_an_addend_read_elsewhere_is_copied_first() -> None:
    def fn(a: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        wide = a.to(torch.bfloat16).float()
        return wide + _scatter(v, i), wide

    inputs = _inputs()
    gm = make_fx(fn)(*inputs)
    expected = gm(*inputs)
    assert fold_scatter_adds(gm) == 1
    assert aten.index_put.default in _targets(gm)
    assert aten.index_put_.default not in _targets(gm)
    torch.testing.assert_close(gm(*inputs), expected)  # the cast is read unchanged


class _TiedLanguageModel(torch.nn.Module):
    """An embedding whose weight is also the output layer's: its gradient
    is the product's plus the lookup's scatter."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.embedding(tokens))
        return F.linear(hidden, self.embedding.weight)


@pytest.mark.parametrize("autocast", [False, True])
def test_tied_embedding_gradient_through_the_backend(autocast: bool) -> None:
    """Under autocast the product's gradient is cast to f32, a tensor of the
    backward's own: the scatter goes into it in place."""
    torch.manual_seed(0)
    model = _TiedLanguageModel()
    tokens = torch.randint(0, VOCAB, (3, TOKENS))

    def step(fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        model.embedding.weight.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = fn(tokens).float().square().sum()
        loss.backward()
        return model.embedding.weight.grad.clone()

    expected = step(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: step(compiled))
    torch.testing.assert_close(got, expected)
    backward = [r for r in records if r.kind == "backward"]
    assert backward and "aten::full" not in backward[0].ir_text
    scatter = "aten::index_put_." if autocast else "aten::index_put."
    assert scatter in backward[0].ir_text
