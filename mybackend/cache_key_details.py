"""torch's cache-key details, computed only where something reads them.

Note [Cache-key details only when read]
Each graph that goes through torch's AOTAutograd cache (option
``warm_start``) has its key computed in ``autograd_cache_key``: one pickle
of the graph, its inputs' metadata and the configs, hashed. The same call
then builds ``debug_lines``, a printable line per key part, by running the
pickler's reducers over every part a second time; those lines only feed a
DEBUG log record and the cache event of torch's structured trace
(TORCH_TRACE, tlparse) and chromium event log. Profiled in a warm process
(GPT-2 small's training step, CPU, 2026-11-29), the lines took 0.064 s of
the backend call's 0.25 s, the key itself 0.048 s, in the cold process as
in the warm one.

So ``install()`` wraps ``AOTAutogradCachePickler.debug_lines``: while
neither that DEBUG log, the structured trace (a handler on torch's trace
log: without TORCH_TRACE its lazy handler removes itself at dynamo's first
structured record) nor the chromium event log is on, it returns no lines;
when any of them is on, torch's own method runs.
The key is the pickle's hash, which the lines never enter: keys and cache
hits do not change. Only the AOTAutograd pickler is wrapped (Inductor's FX
graph cache has its own), process-wide and once, because torch calls it
from whatever thread compiles; the check runs at each call.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from torch._functorch._aot_autograd import autograd_cache

_LOGGER = "torch._functorch._aot_autograd.autograd_cache"
_lock = threading.Lock()
_installed = False


def details_read() -> bool:
    """Whether anything would read the key's detail lines now (yes, where
    this torch names its logs otherwise)."""
    try:
        from torch._dynamo.utils import chromium_event_log_active
        from torch._logging._internal import trace_log
    except ImportError:
        return True
    return (
        logging.getLogger(_LOGGER).isEnabledFor(logging.DEBUG)
        or bool(trace_log.handlers)
        or chromium_event_log_active()
    )


def install() -> None:
    """Wraps the AOTAutograd pickler's ``debug_lines`` once per process
    (Note [Cache-key details only when read]); a torch without it is left
    alone."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        pickler = getattr(autograd_cache, "AOTAutogradCachePickler", None)
        original = getattr(pickler, "debug_lines", None)
        if pickler is None or original is None:
            return

        def debug_lines(self: Any, details: Any) -> list[str]:
            return original(self, details) if details_read() else []

        debug_lines.__wrapped__ = original  # type: ignore[attr-defined]
        pickler.debug_lines = debug_lines
