"""background_compile: compile on a worker thread, run eagerly meanwhile.

``BackgroundGraphFunction`` is handed to aot_autograd in place of the
compiled graph. It submits lowering and ``_C.compile`` to a shared
``ThreadPoolExecutor`` and, until that finishes, runs each call on the ATen
graph eagerly; the first call after it finishes switches to the compiled
callable for good (never waiting for it). Results are the same either way:
the eager path is the graph the core compiles. A compile failure on the
worker follows the usual policy: warned once and eager from then on, or, in
strict mode, raised by the first call after the failure.

Note [No floor while compiling in the background]
The eager floor (Note [Eager is the floor] in mybackend/eager_floor.py)
times the compiled side against the user's graph. While a graph of it is
still compiling, the compiled side runs that graph eagerly, and timing it
would measure eager against eager. So the floor runs the compiled side
untimed, counting no call, while any background compile of the process is
running (``compiles_running``): process-wide, because the floor cannot see
which of aot_autograd's graphs belong to it, and a floor that waits a little
longer costs nothing but later measuring.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import torch.fx

from mybackend._logging import get_logger
from mybackend.compiled import run_eager

log = get_logger("runtime")
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_running = 0  # background compiles submitted and not finished, under _pool_lock


def worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool of compile workers (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="mybackend-compile"
            )
        return _pool


def _submit(compile_fn: Callable[[], Callable[..., Any]]) -> concurrent.futures.Future[Any]:
    global _running
    pool = worker_pool()
    with _pool_lock:
        _running += 1
    # The worker sees the caller's context, so explain() collects its record.
    future = pool.submit(contextvars.copy_context().run, compile_fn)
    future.add_done_callback(_finished)
    return future


def _finished(_: concurrent.futures.Future[Any]) -> None:
    global _running
    with _pool_lock:
        _running -= 1


def compiles_running() -> bool:
    """Whether a background compile is running (Note [No floor while
    compiling in the background])."""
    with _pool_lock:
        return _running > 0


class BackgroundGraphFunction:
    """Runs an ATen graph eagerly until its compiled version is ready (boxed)."""

    _boxed_call = True

    def __init__(
        self,
        name: str,
        gm: torch.fx.GraphModule,
        compile_fn: Callable[[], Callable[..., Any]],
        strict: bool = False,
    ) -> None:
        self.name = name
        self._gm = gm
        self._strict = strict
        self._compiled: Callable[..., Any] | None = None
        self.eager_calls = 0
        self._future = _submit(compile_fn)
        log.debug("%s: compiling in the background", name)

    @property
    def ready(self) -> bool:
        """True once calls run the compiled version (or its eager fallback)."""
        return self._compiled is not None

    def wait(self, timeout: float | None = None) -> Callable[..., Any]:
        """Blocks until compiling finished; returns the compiled callable (tests, scripts)."""
        compiled = self._future.result(timeout)
        self._compiled = compiled
        return compiled

    def compiled(self) -> Callable[..., Any] | None:
        """The compiled callable once ready, else None."""
        return self._compiled

    def stats(self) -> dict[str, int]:
        """The compiled graph's run counters ({} until it is ready or if it fell back)."""
        stats = getattr(self._compiled, "stats", None)
        return dict(stats()) if stats is not None else {}

    def __call__(self, args: list[Any]) -> list[Any]:
        if self._compiled is None and self._future.done():
            log.debug("%s: switching to the compiled version", self.name)
            self._compiled = self._future.result()  # re-raises a strict-mode failure
        if self._compiled is not None:
            return self._compiled(args)  # type: ignore[no-any-return]
        inputs = list(args)
        args.clear()
        self.eager_calls += 1
        return run_eager(self._gm, inputs)
