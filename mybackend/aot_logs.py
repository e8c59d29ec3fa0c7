"""aot_autograd's graph texts, made only when something reads them.

Note [Unread graph texts]
On every training compile aot_autograd prints its joint graph, then the
forward and backward graphs, with sizes, strides and devices
(``GraphModule.print_readable``, in ``_log_joint_graph`` and
``_log_fw_bw_graphs``), whether or not anything reads the text: it is the
payload of its graph logs (TORCH_LOGS ``aot_joint_graph``, ``aot_graphs``),
of the structured trace (TORCH_TRACE) and of an AOTAutograd cache entry.
Ours are large graphs (ResNet-50's joint graph has 3000 nodes with the
decomposed batch norms): the three texts took 0.3-0.5 s of its first
training call on a 2-core CPU machine. So torch's two functions are wrapped,
once per process, and while mybackend calls aot_autograd
(``skipping_unread_graph_texts``, in that thread only) they make no text
when none would be read: both graph logs off, no structured-trace handler,
and no cache entry to write (``cache_info`` is None: our compilers are not
serializable). They then return what they return with logging off
(``AOTConfig.enable_log``), which aot_autograd's callers accept. Anywhere
else (another backend, another thread, a log on) torch's functions run
unchanged; the graphs themselves are never touched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

_graph_compile: ModuleType | None
try:  # private to torch 2.11: without it, the texts are made as before
    _graph_compile = importlib.import_module("torch._functorch._aot_autograd.graph_compile")
except ImportError:  # pragma: no cover - depends on the torch release
    _graph_compile = None

# The functions that make the texts, and what each returns with logging off.
_TEXT_MAKERS: dict[str, Any] = {"_log_joint_graph": None, "_log_fw_bw_graphs": (None, None)}
_LOGGERS = ("aot_joint_log", "aot_graphs_log")

_state = threading.local()  # .active: this thread is inside skipping_unread_graph_texts
_install_lock = threading.Lock()


def structured_trace_on() -> bool:
    """torch's own test before it makes a structured-trace payload."""
    # Imported on use: a private module of torch's, read only while compiling.
    from torch._logging._internal import trace_log

    return bool(trace_log.handlers)


def texts_unread(aot_config: Any) -> bool:
    """Whether no log, structured trace or cache entry would read the graph
    texts of the compile ``aot_config`` describes."""
    loggers = [getattr(_graph_compile, name, None) for name in _LOGGERS]
    return (
        not structured_trace_on()
        and getattr(aot_config, "cache_info", True) is None
        and all(isinstance(x, logging.Logger) and not x.isEnabledFor(logging.INFO) for x in loggers)
    )


def _skipping(function: Callable[..., Any], unlogged: Any) -> Callable[..., Any]:
    @functools.wraps(function)
    def maybe_make_texts(*args: Any, **kwargs: Any) -> Any:
        # aot_config is the last argument of both functions.
        aot_config = kwargs.get("aot_config", args[-1] if args else None)
        if getattr(_state, "active", False) and texts_unread(aot_config):
            return unlogged
        return function(*args, **kwargs)

    maybe_make_texts.mybackend_skips_unread = True  # type: ignore[attr-defined]
    return maybe_make_texts


def _install() -> bool:
    """Wraps the text makers once per process; False where torch lacks them."""
    if _graph_compile is None:
        return False
    with _install_lock:
        functions: dict[str, Callable[..., Any]] = {}
        for name in _TEXT_MAKERS:
            function = getattr(_graph_compile, name, None)
            if not callable(function):
                return False
            functions[name] = function
        for name, function in functions.items():
            if not getattr(function, "mybackend_skips_unread", False):
                setattr(_graph_compile, name, _skipping(function, _TEXT_MAKERS[name]))
    return True


@contextlib.contextmanager
def skipping_unread_graph_texts() -> Iterator[None]:
    """aot_autograd, inside the block and in this thread, makes no graph
    text that nothing reads (Note [Unread graph texts])."""
    if not _install():
        yield
        return
    outer = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = outer
