"""torch's cache-key detail lines only when read (Note [Cache-key details
only when read] in mybackend/cache_key_details.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
import torch
from torch._functorch._aot_autograd import autograd_cache

from mybackend import cache_key_details


def _lines() -> list[str]:
    """The detail lines torch's AOTAutograd pickler gives for two key parts."""
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x))
    pickler = autograd_cache.AOTAutogradCachePickler(gm)
    return pickler.debug_lines(SimpleNamespace(graph="relu", shape=[3]))


@pytest.fixture
def set_level() -> Iterator[Callable[[int], None]]:
    """Sets the autograd cache's logger level for one test, then puts the
    old one back (setLevel also clears isEnabledFor's cached answers)."""
    logger = logging.getLogger("torch._functorch._aot_autograd.autograd_cache")
    before, disabled = logger.level, logger.disabled
    logger.disabled = False
    yield logger.setLevel
    logger.setLevel(before)
    logger.disabled = disabled


def test_the_lines_go_while_nothing_reads_them(
    monkeypatch: pytest.MonkeyPatch, set_level: Callable[[int], None]
) -> None:
    from torch._logging._internal import trace_log

    # torch's trace handler removes itself at dynamo's first structured log
    # when TORCH_TRACE is unset; a fresh test process may not have logged yet.
    # Other tests may have left torch's logs on: all three are set here.
    monkeypatch.setattr(trace_log, "handlers", [])
    monkeypatch.setattr(torch._dynamo.utils, "chromium_event_log_active", lambda: False)
    set_level(logging.WARNING)
    cache_key_details.install()
    assert hasattr(autograd_cache.AOTAutogradCachePickler.debug_lines, "__wrapped__")
    assert not cache_key_details.details_read()
    assert _lines() == []
    set_level(logging.DEBUG)
    assert cache_key_details.details_read()
    logged = _lines()
    assert len(logged) == 2 and "relu" in logged[0]  # torch's own method, a line a part


def test_a_structured_trace_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._logging._internal import trace_log

    monkeypatch.setattr(trace_log, "handlers", [logging.NullHandler()])
    assert cache_key_details.details_read()


def test_installed_once() -> None:
    cache_key_details.install()
    wrapped = autograd_cache.AOTAutogradCachePickler.debug_lines
    cache_key_details.install()
    assert autograd_cache.AOTAutogradCachePickler.debug_lines is wrapped
