"""background_compile: eager first, compiled once ready, identical results."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest
import torch

import mybackend.aot
from mybackend.hooks.background import BackgroundGraphFunction
from tests.testing import HANG_GUARD_S, compiled_records, wait_until


def _model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.exp(x) * 2 - 1).sum(dim=-1)


def _slow_lower(release: threading.Event) -> Any:
    real = mybackend.aot.lower

    def slow(*args: Any, **kwargs: Any) -> Any:
        release.wait(timeout=HANG_GUARD_S)
        return real(*args, **kwargs)

    return slow


def test_runs_eagerly_until_compiled_then_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(mybackend.aot, "lower", _slow_lower(release))
    f = torch.compile(_model, backend="mybackend", options={"background_compile": True})
    x = torch.randn(4, 8)
    expected = _model(x)
    captured: list[BackgroundGraphFunction] = []
    original_call = BackgroundGraphFunction.__call__

    def spy(self: BackgroundGraphFunction, args: list[Any]) -> list[Any]:
        captured.append(self)
        return original_call(self, args)

    monkeypatch.setattr(BackgroundGraphFunction, "__call__", spy)
    for _ in range(3):  # the worker is blocked: these calls must not wait for it
        assert torch.equal(f(x), expected)
    background = captured[0]
    assert background.eager_calls == 3 and not background.ready and background.stats() == {}
    release.set()
    background.wait(timeout=HANG_GUARD_S)
    assert torch.equal(f(x), expected)
    assert background.ready and background.eager_calls == 3
    assert background.stats()["nodes_run_in_partitions"] > 0


def test_eventually_runs_compiled_without_waiting() -> None:
    f = torch.compile(_model, backend="mybackend", options={"background_compile": True})
    x = torch.randn(4, 8)
    expected = _model(x)

    def run() -> torch.Tensor:
        return f(x)

    out, records = compiled_records(run)
    assert torch.equal(out, expected)

    def compiled_took_over() -> bool:
        assert torch.equal(f(x), expected)
        compiled = [r.compiled for r in records if r.compiled is not None]
        return bool(compiled) and compiled[0].stats()["nodes_run_in_partitions"] > 0

    wait_until(compiled_took_over, "the background compile taking over")


def test_training_gives_identical_gradients() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="mybackend", options={"background_compile": True})
    x = torch.randn(16, 8)
    for _ in range(5):
        f(x).sum().backward()
        reference(x).sum().backward()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def test_failure_on_the_worker_falls_back_or_raises_in_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected background failure")

    monkeypatch.setattr(mybackend.aot, "lower", broken)
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    strict = BackgroundGraphFunction("g", gm, lambda: broken(), strict=True)
    with pytest.raises(RuntimeError, match="injected background failure"):
        strict.wait(timeout=HANG_GUARD_S)
    f = torch.compile(_model, backend="mybackend", options={"background_compile": True})
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def warned() -> bool:
            assert torch.equal(f(x), _model(x))
            return any("injected background failure" in str(w.message) for w in caught)

        wait_until(warned, "the background failure's warning")


@pytest.mark.parametrize("option", ["background_compile", "accuracy_check"])
def test_debug_switches_take_booleans_only(option: str) -> None:
    f = torch.compile(_model, backend="mybackend", options={option: "yes"})
    with pytest.raises(Exception, match=f"option '{option}' takes bool, got str 'yes'"):
        f(torch.randn(2, 2))
