"""Logging for mybackend: one ``logging`` logger per pipeline stage.

Loggers are children of ``mybackend`` (``mybackend.lowering``,
``mybackend.partition``, ...), so standard ``logging`` configuration applies.
``MYBACKEND_LOGS=+partition,fallback`` (or ``all``) turns channels on at DEBUG
level when the backend first compiles; nothing is read at import time.
The ``mybackend`` logger is also a TORCH_LOGS component
(``register_with_torch_logging``; TORCH_TRACE artifacts: mybackend/hooks/
tracing.py), so ``TORCH_LOGS="+mybackend"`` does the same as ``all``.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

from torch._logging import _internal as torch_logging

COMPONENT = "mybackend"  # our name in torch's log registry
CHANNELS = ("dynamo", "aot", "lowering", "partition", "fusion", "runtime", "fallback")

_warned: set[str] = set()
_warned_lock = threading.Lock()
_env_applied = False
_registered = False


def get_logger(channel: str) -> logging.Logger:
    """The logger of one pipeline stage."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown log channel {channel!r}; channels: {', '.join(CHANNELS)}")
    return logging.getLogger(f"mybackend.{channel}")


def apply_env_log_settings() -> None:
    """Turns on the channels named in MYBACKEND_LOGS (once per process)."""
    global _env_applied
    if _env_applied:
        return
    _env_applied = True
    register_with_torch_logging()
    spec = os.environ.get("MYBACKEND_LOGS", "").strip()
    if not spec:
        return
    names = [n.strip().lstrip("+") for n in spec.split(",") if n.strip()]
    if "all" in names:
        names = list(CHANNELS)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    for name in names:
        logger = get_logger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)


def register_with_torch_logging() -> None:
    """Registers ``mybackend`` with torch's log registry (``set_logs(modules=...)``).

    TORCH_LOGS needs nothing from us: torch reads ``+mybackend`` as a module
    name, imports mybackend to check it, and configures the logger itself.
    """
    global _registered
    if _registered:
        return
    _registered = True
    torch_logging.register_log(COMPONENT, COMPONENT)


def warn_once(key: str, message: str) -> None:
    """Emits ``message`` as a UserWarning the first time ``key`` is seen."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=3)
    get_logger("fallback").warning(message)


def reset_warnings() -> None:
    """Forgets which warnings were shown (tests, notebooks)."""
    with _warned_lock:
        _warned.clear()
