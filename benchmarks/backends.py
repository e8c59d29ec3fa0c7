"""The backend registry: a benchmark backend name -> torch.compile keyword arguments.

``"eager"`` is the plain, uncompiled module (the baseline every speedup is
measured against). Every other entry is compiled with ``torch.compile(module,
**kwargs)``, so a backend registered with Dynamo by name (mybackend through its
``torch_dynamo_backends`` entry point) is picked up as soon as it is installed.

Besides the names below, ``resolve`` accepts a callable (a Dynamo backend
function, for tests) and a ``"package.module:attr"`` string naming either such
a callable or a dict of torch.compile keyword arguments (so a subprocess of the
CLI can rebuild a test backend by name).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

REGISTRY: dict[str, dict[str, Any] | None] = {
    "eager": None,
    "dynamo-eager": dict(backend="eager"),
    "aot-eager": dict(backend="aot_eager"),
    "inductor": dict(backend="inductor"),
    "inductor-reduce-overhead": dict(backend="inductor", mode="reduce-overhead"),
    "cudagraphs": dict(backend="cudagraphs"),
    "mybackend": dict(backend="mybackend", mode="default"),
    "mybackend-reduce-overhead": dict(backend="mybackend", mode="reduce-overhead"),
    # What the compiled graphs run when no eager floor stands in for them
    # (profiles of rows where the floor chose eager). torch.compile takes a
    # mode or options, not both: cuda_graphs is what reduce-overhead sets.
    "mybackend-reduce-overhead-no-floor": dict(
        backend="mybackend", options={"cuda_graphs": True, "eager_floor": False}
    ),
    # Without generated kernels: ATen calls and cuBLASLt groups only.
    "mybackend-no-generated": dict(backend="mybackend", options={"generated_kernels": False}),
    # Keeps compiled graphs in torch's AOTAutograd cache (docs/warm-start.md):
    # its second fresh process on the same TORCHINDUCTOR_CACHE_DIR is the warm start.
    "mybackend-warm-start": dict(backend="mybackend", options={"warm_start": True}),
}

# Backends whose point is CUDA graphs: on a CPU they measure nothing new.
CUDA_ONLY = frozenset(
    {
        "inductor-reduce-overhead",
        "cudagraphs",
        "mybackend-reduce-overhead",
        "mybackend-reduce-overhead-no-floor",
    }
)

DEFAULT_GPU = (
    "eager",
    "inductor",
    "inductor-reduce-overhead",
    "cudagraphs",
    "mybackend",
    "mybackend-reduce-overhead",
)
# On the CPU (--quick, CI) Inductor's C++ compiles take minutes on two cores;
# aot-eager exercises the same Dynamo + AOTAutograd path at no compile cost.
DEFAULT_CPU = ("eager", "aot-eager", "mybackend")


@dataclasses.dataclass(frozen=True)
class Backend:
    """A resolved benchmark backend.

    ``spec`` is the string that rebuilds it in another process (None for a
    bare callable, which cannot cross a process boundary).
    """

    name: str
    compile_kwargs: Mapping[str, Any] | None
    spec: str | None

    @property
    def is_eager(self) -> bool:
        return self.compile_kwargs is None

    def compile(self, module: Callable[..., Any]) -> Callable[..., Any]:
        """Returns ``module`` itself for eager, else ``torch.compile(module, ...)``."""
        if self.compile_kwargs is None:
            return module
        return torch.compile(module, **self.compile_kwargs)

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here, or None when it can."""
        if self.compile_kwargs is None:
            return None
        backend = self.compile_kwargs.get("backend", "inductor")
        if callable(backend):
            return None
        return _lookup_failure(backend)


def _lookup_failure(name: str) -> str | None:
    """None when Dynamo knows backend ``name``, else why not.

    A package that registers its backend on import (``import mybackend``) but
    is not pip-installed, so has no entry point, is imported once to register.
    """
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend(name)
        return None
    except Exception as exc:  # any failure means "not registered (yet)"
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
    try:
        importlib.import_module(name.replace("-", "_"))
        lookup_backend(name)
        return None
    except Exception as exc:
        return f"backend {name!r} is not available: {first}; import: {type(exc).__name__}: {exc}"


def resolve(backend: str | Callable[..., Any]) -> Backend:
    """Turns a registry name, an import spec or a backend callable into a Backend."""
    if callable(backend):
        name = getattr(backend, "__name__", type(backend).__name__)
        return Backend(name, {"backend": backend}, None)
    if backend in REGISTRY:
        return Backend(backend, REGISTRY[backend], backend)
    if ":" in backend:
        module_name, _, attr = backend.partition(":")
        target = getattr(importlib.import_module(module_name), attr)
        kwargs = dict(target) if isinstance(target, Mapping) else {"backend": target}
        return Backend(attr, kwargs, backend)
    raise ValueError(
        f"unknown backend {backend!r}; choose from {sorted(REGISTRY)} or give 'package.module:attr'"
    )


def default_names(on_cuda: bool) -> tuple[str, ...]:
    """The backends a run measures when none are named."""
    return DEFAULT_GPU if on_cuda else DEFAULT_CPU
