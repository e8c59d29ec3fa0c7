"""Deliberately broken Dynamo backends for the harness tests.

They are importable by name (``bench_fake_backends:add_one``) so that a
subprocess of the CLI can rebuild them.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

SLEEP_S = 0.02


def passthrough(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A correct backend: runs the captured graph as it is."""
    return gm.forward


def add_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A wrong backend: adds 1.0 to every floating-point output of the graph."""

    def run(*args: Any) -> Any:
        return pytree.tree_map(
            lambda t: t + 1.0 if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
            gm(*args),
        )

    return run


def sleepy(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A slow backend: sleeps SLEEP_S before every call of the graph."""

    def run(*args: Any) -> Any:
        time.sleep(SLEEP_S)
        return gm(*args)

    return run


def warns(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A correct backend that warns while compiling, as a fallback to eager would."""
    warnings.warn("fake backend: falling back to eager", UserWarning, stacklevel=2)
    return gm.forward


def crash(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend that kills its process with SIGSEGV while compiling."""
    os.kill(os.getpid(), signal.SIGSEGV)
    return gm.forward
