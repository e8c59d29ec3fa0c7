"""Stage 1: the backend dynamo calls, registered as "mybackend".

``torch.compile(model, backend="mybackend", mode=..., options=...)`` calls
mybackend_backend once per captured FX graph. It validates the options
(bad ones raise: they are the user's to fix), then hands the graph to
aot_autograd. A failure inside the backend never takes the program down:
the graph runs eagerly, with one warning, unless strict mode is on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.fx
from torch._dynamo import exc as dynamo_exc

from mybackend._logging import apply_env_log_settings, get_logger, warn_once
from mybackend.aot import compile_with_aot
from mybackend.compiled import UserGraphFallback, with_user_graph_floor
from mybackend.distributed import FlattenedCall, flatten_list_input, has_nested_inputs
from mybackend.gc_pause import collections_paused
from mybackend.hooks.background import compiles_running
from mybackend.options import Options
from mybackend.reports import GraphRecord, collecting, publish

BACKEND_NAME = "mybackend"
log = get_logger("dynamo")

# Note [Dynamo's control-flow exceptions]
# Dynamo steers its own analysis with exceptions that pass through the
# backend: a Python float that changes between calls makes the tensorify
# pass (run inside aot_autograd's trace) raise TensorifyScalarRestartAnalysis,
# and dynamo re-traces the frame with the scalar as a tensor input. They are
# signals, not failures: caught as one, the graph would run eagerly for good.
DYNAMO_SIGNALS: tuple[type[BaseException], ...] = (
    dynamo_exc.RestartAnalysis,
    dynamo_exc.SkipFrame,
    dynamo_exc.ShortenTraceback,
)


def mybackend_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compiles one dynamo graph; the entry point torch.compile looks up."""
    parsed = Options.from_user(mode, options)
    apply_env_log_settings()
    if (problem := parsed.kernel_cache_problem()) is not None:
        # The core drops an unusable cache folder silently (issue 32): say so.
        warn_once(
            f"kernel-cache:{problem}",
            f"mybackend: {problem}; generated kernels are cached in this process's "
            "memory only (the CPU path generates none). Set kernel_cache_dir or "
            "MYBACKEND_CACHE_DIR to a writable folder, or 'off'.",
        )
    try:
        # Note [Graphs of compiled autograd] (mybackend/distributed.py)
        if (
            has_nested_inputs(example_inputs)
            and (flat := flatten_list_input(gm, example_inputs)) is not None
        ):
            flat_gm, flat_inputs, empty_list = flat
            flat_compiled = mybackend_backend(flat_gm, flat_inputs, mode, options)
            return FlattenedCall(flat_compiled, empty_list)
        # Note [No cyclic collections while compiling]
        with collections_paused(), collecting() as records:
            compiled = compile_with_aot(gm, example_inputs, parsed)
        # Note [Eager is the floor]
        compiled = with_user_graph_floor(
            compiled, gm, example_inputs, parsed, records, compiles_running
        )
        if parsed.strict:
            return compiled
        # Note [Recovery runs the user's program]
        return UserGraphFallback(compiled, gm.forward)
    except DYNAMO_SIGNALS:
        raise
    except Exception as error:
        if parsed.strict:
            raise
        reason = f"{type(error).__name__}: {error}"
        warn_once(
            f"aot:{reason}",
            f"mybackend: aot_autograd could not trace a graph ({reason}); it runs eagerly. "
            "Pass options={'strict': True} to raise instead.",
        )
        publish(GraphRecord("dynamo graph", "dynamo", str(gm.graph), None, [], reason))
        return gm.forward


def register() -> None:
    """Makes backend="mybackend" resolvable; safe to call any number of times.

    When the package is installed, dynamo finds the backend through the
    ``torch_dynamo_backends`` entry point and registers it itself on first
    lookup: registering here too would make that lookup fail with dynamo's
    "duplicate name" error, so we register only when no entry point exists
    (e.g. running from a source tree).
    """
    # Imported on use: torch's private registry, needed once per process.
    from torch._dynamo.backends import registry

    if BACKEND_NAME in registry._COMPILER_FNS:
        return
    registry._discover_entrypoint_backends()
    if registry._BACKENDS.get(BACKEND_NAME) is not None:
        return
    registry.register_backend(mybackend_backend, name=BACKEND_NAME)
