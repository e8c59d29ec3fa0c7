"""Run-time failures: a graph that runs in eager never fails under mybackend
in non-strict mode (Note [Recovery runs the user's program] in compiled.py)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from mybackend.compiled import BackendFailure
from mybackend.passes import pipeline

aten = torch.ops.aten


def _broken_relu(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("injected: a rewrite broke this graph")


def _break_relus(gm: torch.fx.GraphModule, **kwargs: Any) -> int:
    """A graph rewrite gone wrong: every ReLU becomes a call that raises,
    in the compiled graph and in its eager run alike."""
    broken = 0
    for node in gm.graph.find_nodes(op="call_function", target=aten.relu.default):
        node.target = _broken_relu
        broken += 1
    return broken


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2


@pytest.fixture
def broken_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "fold_scatter_adds", _break_relus)
    torch._dynamo.reset()


@pytest.mark.parametrize("grad", [False, True])
def test_a_broken_rewrite_still_gives_the_right_result(broken_rewrite: None, grad: bool) -> None:
    torch.manual_seed(0)
    module, x = Block(), torch.randn(4, 8)
    compiled = torch.compile(module, backend="mybackend")
    with torch.set_grad_enabled(grad), pytest.warns(UserWarning) as caught:
        out = compiled(x)
    expected = module(x)
    torch.testing.assert_close(out, expected)
    messages = [str(w.message) for w in caught]
    assert any("user's program ran correctly without mybackend" in m for m in messages), messages
    assert any("injected: a rewrite broke this graph" in m for m in messages), messages
    if grad:
        out.sum().backward()
        grads = [p.grad.clone() for p in module.parameters()]
        module.zero_grad()
        expected.sum().backward()
        for a, b in zip(grads, module.parameters(), strict=True):
            torch.testing.assert_close(a, b.grad)
    with warnings.catch_warnings():  # later calls: the user's graph, no new warning
        warnings.simplefilter("error")
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(compiled(x), module(x))


def test_strict_mode_raises_the_failure_naming_mybackend(broken_rewrite: None) -> None:
    compiled = torch.compile(Block(), backend="mybackend", options={"strict": True})
    with torch.no_grad(), pytest.raises(RuntimeError, match="injected") as raised:
        compiled(torch.randn(4, 8))
    notes = getattr(raised.value, "__notes__", [])
    assert any("mybackend" in note and "compiled runtime" in note for note in notes), notes


def test_an_error_of_the_users_own_program_stays_theirs() -> None:
    def program(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)[index] * 2

    torch._dynamo.reset()
    compiled = torch.compile(program, backend="mybackend")
    x = torch.randn(4, 8)
    compiled(x, torch.tensor([0, 1]))
    with pytest.raises(IndexError) as raised:
        compiled(x, torch.tensor([0, 9]))
    assert not isinstance(raised.value, BackendFailure)
