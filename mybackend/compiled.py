"""The callables handed back to aot_autograd and dynamo, and the failure
policy at run time.

CompiledGraphFunction runs one ATen graph and follows aot's boxed calling
convention (one list of inputs, cleared once read so activations can be
freed early). UserGraphFallback wraps what the backend returns to dynamo.

Note [Recovery runs the user's program]
A graph that runs in eager never fails under mybackend in non-strict mode.
When the core fails on a call, the ATen graph it compiled runs eagerly; if
that works, it runs eagerly from then on (warned once). But that graph
carries mybackend's rewrites (channels-last layouts, padded products, fused
custom ops), and a rewrite can be what broke: then its eager run fails the
same way, and the error is not the user's. It becomes a BackendFailure,
which UserGraphFallback catches where dynamo called the backend's callable:
it runs dynamo's graph, the user's program before any of mybackend's work,
and runs that from then on (warned once). If the user's program fails too,
its own error is raised: that one is theirs. A BackendFailure raised in a
backward graph reaches the user as it is (the forward that saved the
backward's inputs has already run): it says that mybackend failed and how
to run without it.

Note [Boxed inputs die in the graph]
Nothing here keeps a reference to the inputs while the compiled graph runs:
the boxed list itself (with the constants appended) goes to
``_C.CompiledGraph.run_boxed``, which empties it and hands every input to
the C++ executor, which releases each after its last use, so a backward
graph frees saved activations as it goes, as eager autograd does. Recovery
needs the inputs, so the core keeps them on trial calls only (the first
call of each input signature) and puts them back into the list when such a
call fails (Note [Input ownership] in src_cpp/runtime/recovery_window.h).
A failure on a proven signature finds the list empty: it is data- or
resource-dependent (out of memory, a device-side assert), eager would fail
alike, and the error is raised as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mybackend._logging import get_logger, warn_once
from mybackend.distributed import has_collectives, multi_rank
from mybackend.eager_floor import (
    COMPILED,
    EAGER,
    CudaCallTimer,
    EagerFloor,
    FloorInputs,
    StepTimer,
    floor_cache_path,
    runs_on_cuda,
)
from mybackend.hooks.accuracy import check_partitions, warn_if_exceeded
from mybackend.lowering import LoweredGraph
from mybackend.options import Options
from mybackend.reports import GraphRecord

log = get_logger("runtime")


class BackendFailure(RuntimeError):
    """mybackend failed where the user's program does not (Note [Recovery
    runs the user's program]); the cause is chained."""


class CompiledGraphFunction:
    """Runs one ATen graph through the C++ core: ``f(inputs: list) -> list``."""

    _boxed_call = True

    def __init__(
        self,
        name: str,
        lowered: LoweredGraph,
        compiled: Any,  # _C.CompiledGraph
        eager: Callable[..., Any],
        options: Options,
    ) -> None:
        self.name = name
        self._compiled = compiled
        self._constants = lowered.constants
        self._eager = eager
        self._options = options
        self._fell_back = False
        self._check_accuracy = options.accuracy_check
        self.record: Any = None  # its GraphRecord, set by the compiler
        self.warm_recipe: Any = None  # set when warm start keeps it (mybackend/warm_start.py)
        self.accuracy: list[dict[str, Any]] = []  # accuracy_check's results, per partition

    def __call__(self, args: list[Any]) -> list[Any]:
        if self._fell_back:
            return run_eager_boxed(self._eager, args)
        if self._check_accuracy:
            self._check_accuracy = False
            try:
                self._run_accuracy_check(list(args))
            except Exception as error:  # the check must not break the user's call
                if self._options.strict:
                    raise
                warn_once(f"accuracy:{self.name}", f"mybackend: accuracy check of "
                          f"{self.name} failed ({type(error).__name__}: {error})")  # fmt: skip
        return self._run_compiled(args)

    def _run_compiled(self, args: list[Any]) -> list[Any]:
        # Note [Boxed inputs die in the graph]: `args` is the only holder here.
        count = len(args)
        args.extend(self._constants)
        try:
            return self._compiled.run_boxed(args)  # type: ignore[no-any-return]
        except Exception as error:
            if self._options.strict and hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"mybackend: raised by graph {self.name} in the compiled runtime")
            if self._options.strict or not args:
                raise
            inputs = args[:count]
            args.clear()
            return self._recover(inputs, error)

    def _recover(self, inputs: list[Any], error: Exception) -> list[Any]:
        try:
            outputs = run_eager(self._eager, inputs)
        except Exception as eager_error:  # Note [Recovery runs the user's program]
            raise BackendFailure(
                f"mybackend: graph {self.name} failed in the compiled runtime "
                f"({type(error).__name__}: {error}) and again when run eagerly with "
                f"mybackend's rewrites ({type(eager_error).__name__}: {eager_error})"
            ) from error
        self._fell_back = True
        warn_once(
            f"runtime:{self.name}",
            f"mybackend: running graph {self.name} failed in the compiled runtime ({error}); "
            "it runs eagerly from now on. Pass options={'strict': True} to raise instead.",
        )
        return outputs

    def _run_accuracy_check(self, inputs: list[Any]) -> None:
        gm = self._eager
        if self.record is None or self.record.core_report is None:
            return
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError(f"accuracy_check needs the ATen GraphModule, got {type(gm).__name__}")
        self.accuracy = check_partitions(gm, self.record.core_report, inputs, self._options)
        warn_if_exceeded(self.name, self.accuracy)

    def stats(self) -> dict[str, int]:
        """Execution counters of the C++ runtime (see _C.CompiledGraph.stats)."""
        return self._compiled.stats()  # type: ignore[no-any-return]

    def host_times(self) -> list[tuple[str, int, float]]:
        """Host time by step label, (label, calls, microseconds) each (see
        _C.CompiledGraph.host_times); empty unless MYBACKEND_HOST_TIMES=1."""
        return self._compiled.host_times()  # type: ignore[no-any-return]

    def report(self) -> dict[str, Any]:
        return self._compiled.report()  # type: ignore[no-any-return]


def run_eager(graph_fn: Callable[..., Any], inputs: list[Any]) -> list[Any]:
    """Runs an FX graph module (or its forward) on a list of inputs."""
    outputs = graph_fn(*inputs)
    return list(outputs) if isinstance(outputs, list | tuple) else [outputs]


def run_eager_boxed(graph_fn: Callable[..., Any], args: list[Any]) -> list[Any]:
    """run_eager with aot's boxed convention: the list is emptied before the
    run, so that the graph alone holds its inputs (Note [Boxed inputs die in
    the graph])."""
    inputs = list(args)
    args.clear()
    return run_eager(graph_fn, inputs)


class _AotWrapper:
    """A callable in front of aot_autograd's compiled function that passes
    aot's attributes (named_parameters, ...) through."""

    _compiled: Callable[..., Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # ours, before __init__ set them (copy, pickle)
            raise AttributeError(name)
        return getattr(self._compiled, name)


class UserGraphFallback(_AotWrapper):
    """What the backend hands dynamo for one captured graph: aot_autograd's
    compiled function, and the user's graph to run instead once mybackend
    failed on it (Note [Recovery runs the user's program])."""

    def __init__(self, compiled: Callable[..., Any], user_graph: Callable[..., Any]) -> None:
        self._compiled = compiled
        self._user_graph = user_graph
        self._use_user_graph = False

    def __call__(self, *args: Any) -> Any:
        if self._use_user_graph:
            return self._user_graph(*args)
        try:
            return self._compiled(*args)
        except BackendFailure as failure:
            outputs = self._user_graph(*args)  # its error, if any, is the user's
            self._use_user_graph = True
            warn_once(
                f"user-graph:{failure}",
                f"{failure}; the user's program ran correctly without mybackend and runs "
                "eagerly from now on. Pass options={'strict': True} to raise instead.",
            )
            return outputs


class UserGraphFloorCall(_AotWrapper):
    """The eager floor of one dynamo graph (Note [Eager is the floor] in
    mybackend/eager_floor.py): aot_autograd's compiled function against the
    user's graph, a training call with its backward (Note [A training step is
    timed whole])."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        user_graph: Callable[..., Any],
        floor: EagerFloor,
        compiling: Callable[[], bool] = lambda: False,
    ) -> None:
        self._compiled = compiled
        self._user_graph = user_graph
        self.floor = floor
        # Note [No floor while compiling in the background]
        self._compiling = compiling
        self._ran_once = False  # the first call is the compiled graph's trial

    def __call__(self, *args: Any) -> Any:
        if self._ran_once:
            # Every call after the choice passes here: straight to the chosen side.
            choice = self.floor.choice
            if choice == COMPILED:
                return self._compiled(*args)
            if choice == EAGER:
                return self._user_graph(*args)
            if not self._compiling():
                return self.floor.run(list(args), self._run_compiled, self._run_user_graph)
        outputs = self._compiled(*args)
        self._ran_once = True
        return outputs

    def _run_compiled(self, args: list[Any]) -> Any:
        return self._compiled(*args)

    def _run_user_graph(self, args: list[Any]) -> Any:
        return self._user_graph(*args)


def with_user_graph_floor(
    compiled: Callable[..., Any],
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: Options,
    records: Sequence[GraphRecord] = (),
    compiling: Callable[[], bool] = lambda: False,
) -> Callable[..., Any]:
    """Puts the eager floor in front of aot_autograd's compiled function for
    one dynamo graph on CUDA (Note [Eager is the floor]). ``records`` are the
    graphs compiled for it so far: explain() shows the floor with them.
    ``compiling`` says whether a background compile is still running."""
    if not (
        options.eager_floor
        and runs_on_cuda(example_inputs)
        and not has_collectives(gm)  # Note [No floor across collectives]
        and not multi_rank()
    ):
        return compiled
    training = is_training_graph(example_inputs)
    # "step:" as the training floor's key was first written: choices stay found.
    kind = "step" if training else "inference"
    inputs = FloorInputs.of(example_inputs)
    cache_file = floor_cache_path(options.cache_root(), gm.code, inputs, f"{kind}:{options!r}")
    name = f"{type(gm).__name__} ({'training step' if training else 'inference'})"
    floor = EagerFloor(name, cache_file, timer=StepTimer() if training else CudaCallTimer())
    for record in records:
        record.floor = floor
    return UserGraphFloorCall(compiled, gm.forward, floor, compiling)


def is_training_graph(example_inputs: Sequence[Any]) -> bool:
    """Whether aot_autograd splits the graph into a forward and a backward."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs
    )


class EagerGraphFunction:
    """An ATen graph that the core could not compile, run eagerly (boxed)."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self._gm = gm

    def __call__(self, args: list[Any]) -> list[Any]:
        return run_eager_boxed(self._gm, args)
