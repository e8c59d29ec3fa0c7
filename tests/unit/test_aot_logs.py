"""aot_autograd makes graph texts only when something reads them (Note
[Unread graph texts] in mybackend/aot_logs.py)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._functorch._aot_autograd import graph_compile

from mybackend import aot_logs


@pytest.fixture
def no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process without TORCH_TRACE (under pytest, torch's structured-trace
    log carries pytest's capture handlers, which would read every text)."""
    monkeypatch.setattr(aot_logs, "structured_trace_on", lambda: False)


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The modules that printed a graph while the test ran (dynamo prints
    its own graph for its structured trace)."""
    names: list[str] = []
    original = torch.fx.GraphModule.print_readable

    def counting(self: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        names.append(sys._getframe(1).f_globals["__name__"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.GraphModule, "print_readable", counting)
    yield names


def _config(cache_info: Any = None) -> Any:
    return types.SimpleNamespace(cache_info=cache_info, enable_log=True, aot_id=0)


@pytest.mark.usefixtures("no_trace")
def test_a_training_compile_prints_no_graph_nothing_reads(printed: list[str]) -> None:
    torch._dynamo.reset()
    w = torch.randn(8, 8, requires_grad=True)
    compiled = torch.compile(
        lambda x: torch.tanh(x @ w).sum(), backend="mybackend", options={"strict": True}
    )
    compiled(torch.randn(4, 8)).backward()
    assert w.grad is not None
    assert graph_compile.__name__ not in printed


@pytest.mark.usefixtures("no_trace")
def test_graph_logs_still_get_their_text() -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with aot_logs.skipping_unread_graph_texts():
        assert graph_compile._log_joint_graph(gm, _config()) is None
        torch._logging.set_logs(aot_joint_graph=True)
        try:
            text = graph_compile._log_joint_graph(gm, _config())
        finally:
            torch._logging.set_logs()
    assert isinstance(text, str) and "add" in text


@pytest.mark.usefixtures("no_trace")
def test_texts_are_read_by_a_cache_entry_or_a_structured_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert aot_logs.texts_unread(_config())
    assert not aot_logs.texts_unread(_config(cache_info=object()))
    assert not aot_logs.texts_unread(object())  # a config we do not know: texts made
    monkeypatch.setattr(aot_logs, "structured_trace_on", lambda: True)
    assert not aot_logs.texts_unread(_config())


def test_outside_the_block_torch_makes_its_texts(no_trace: None) -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with aot_logs.skipping_unread_graph_texts():
        pass
    assert isinstance(graph_compile._log_joint_graph(gm, _config()), str)
