"""Eager is the floor: a compiled graph that runs slower than the user's
program it replaces hands its calls back to that program.

Note [Eager is the floor]
The planner's choices come from rules, and a rule can lose on a model
nobody measured: a layout that makes a depthwise convolution slow, a
generated kernel that loses to a library one. So each dynamo graph compiled
for CUDA measures itself, on its first calls, against the user's graph:
dynamo's FX graph run as it is, which is what eager runs
(UserGraphFloorCall in mybackend/compiled.py, in front of aot_autograd's
compiled function). Not aot_autograd's ATen graph: decomposed, a group norm
becomes a dozen ATen kernels and a batch norm five, so that reference can
be slower than the module's own eager call, and a compiled graph slower
than eager still beat it (a UNet ran at 0.66x eager behind such a floor, on
an H100). An inference call costs its own run; a training call its forward
and the backward it leads to (Note [A training step is timed whole]):

- After ``warmup`` untimed calls of the compiled side, then of eager
  (captures, autotuning, the allocator's growth), calls alternate between
  the two. A call's cost is the
  larger of its GPU span (CUDA events around it) and its host time: a
  launch-bound eager graph shows in the host time, a GPU-bound one in the
  span.
- Every call computes its outputs once, by one side, so in-place updates,
  RNG draws and autograd see exactly one run per call, as in eager.
- Once each side has ``samples`` timed calls and the last event completed
  (queried, never waited for), the side with the lower median cost runs
  from then on. The compiled graph keeps the calls unless eager is cheaper
  by more than ``margin`` (3 %): noise must not send a good graph back to
  eager.
- Only calls with the input shapes of the first timed call are timed; a
  graph with dynamic shapes decides on its first shape. Nothing is timed
  while the caller captures a CUDA graph (events cannot be recorded there)
  or while a background compile runs (Note [No floor while compiling in
  the background] in mybackend/hooks/background.py); such calls run
  compiled.
- The choice is written to a small file under the kernel cache folder, keyed
  by the dynamo graph's code, its input shapes, the GPU, the torch and
  mybackend versions and the options, so a later process with the same
  graph starts with it instead of measuring again. An unreadable file is
  ignored with one warning and the graph measured again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mybackend._files import write_atomically
from mybackend._logging import get_logger, warn_once
from mybackend.options import extension_build

log = get_logger("runtime")

BoxedCall = Callable[[list[Any]], list[Any]]

COMPILED = "compiled"
EAGER = "eager"
_FILE_VERSION = 1


class CudaCallTimer:
    """Times one call by CUDA events on the current stream and by the host
    clock; the cost is the larger (Note [Eager is the floor])."""

    def can_time(self) -> bool:
        return not torch.cuda.is_current_stream_capturing()

    def start(self, inputs: Sequence[Any] = ()) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event, time.perf_counter()

    def stop(self, started: Any, outputs: Any = None) -> Any:
        start, began = started
        host_ms = (time.perf_counter() - began) * 1e3
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return start, end, host_ms

    def close(self) -> None:
        """Called once the choice is made: nothing of the timer's stays behind."""

    def ready(self, timed: Any) -> bool:
        return bool(timed[1].query())

    def cost_ms(self, timed: Any) -> float:
        start, end, host_ms = timed
        return max(float(start.elapsed_time(end)), float(host_ms))


@dataclasses.dataclass
class StepRecord:
    """One timed training call: its forward, then its backward once autograd
    has run it (Note [A training step is timed whole])."""

    forward_start: Any
    forward_end: Any
    host_ms: float
    expects_backward: bool = False
    backward_start: Any = None
    backward_end: Any = None


class StepTimer(CudaCallTimer):
    """Times a training graph's call with the backward it leads to.

    Note [A training step is timed whole]
    A training graph's forward and backward are two ATen graphs, and timing
    each against aot_autograd's graph run eagerly compares mybackend with a
    decomposed program slower than the module's own eager step (ConvNeXt
    trained at 0.88x eager past such floors, on an H200). So the dynamo graph
    of a training step is timed against the user's graph itself (what eager
    runs, autograd and all) by the floor in front of both (UserGraphFloorCall
    in mybackend/compiled.py), and a call's cost is its forward and its
    backward: the forward by events around the call, as CudaCallTimer does;
    the backward from when autograd first runs a node that made one of the
    call's outputs (a pre-hook on those nodes, which runs after the hooks on
    their tensors: a module's own backward hooks, such as FSDP2's unshard,
    come before it) to when it has the gradients of all of the call's
    inputs that require them (``mode="all"``), or of its activations only
    when it has any: a parameter used again earlier in the program (a tied
    embedding) gets its whole gradient only at the end of the backward.
    Events are recorded on the stream autograd runs that backward on. A call
    whose backward never runs (no output reaches a loss) never completes,
    and the floor keeps the compiled graph. The hooks on the inputs (the
    parameters among them) are removed when they fire and when the choice is
    made, so nothing stays behind on a parameter.
    """

    def __init__(self, event: Callable[[], Any] | None = None) -> None:
        self._event = event if event is not None else _recorded_cuda_event
        self._handles: list[Any] = []

    def start(self, inputs: Sequence[Any] = ()) -> Any:
        needing_grad = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        return self._event(), time.perf_counter(), needing_grad

    def stop(self, started: Any, outputs: Any = None) -> Any:
        start, began, inputs = started
        host_ms = (time.perf_counter() - began) * 1e3
        record = StepRecord(start, self._event(), host_ms)
        leaves = torch.utils._pytree.tree_leaves(outputs)
        nodes = {
            id(t.grad_fn): t.grad_fn
            for t in leaves
            if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None
        }
        # A parameter's gradient can be complete only at the end of the whole
        # backward (a tied embedding read again by the head); an activation's
        # is complete when this graph's backward is.
        ends = [t for t in inputs if t.grad_fn is not None] or inputs
        if not (torch.is_grad_enabled() and nodes and ends):
            return record
        record.expects_backward = True
        handles: list[Any] = []

        def backward_began(_: Any) -> None:
            if record.backward_start is None:
                record.backward_start = self._event()

        def backward_ended(_: Any) -> None:
            record.backward_end = self._event()
            for handle in handles:
                handle.remove()

        # A node's pre-hooks run after the hooks on its tensors: FSDP2's
        # unshard (and its wait for the other ranks) comes before the start.
        handles.extend(node.register_prehook(backward_began) for node in nodes.values())
        hooks = torch.autograd.graph.register_multi_grad_hook
        handles.append(hooks(ends, backward_ended, mode="all"))
        self._handles.extend(handles)
        return record

    def ready(self, timed: Any) -> bool:
        if not timed.expects_backward:
            return bool(timed.forward_end.query())
        return timed.backward_end is not None and bool(timed.backward_end.query())

    def cost_ms(self, timed: Any) -> float:
        forward = max(float(timed.forward_start.elapsed_time(timed.forward_end)), timed.host_ms)
        if timed.backward_start is None or timed.backward_end is None:
            return forward
        return forward + float(timed.backward_start.elapsed_time(timed.backward_end))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _recorded_cuda_event() -> Any:
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


@dataclasses.dataclass(frozen=True)
class FloorSettings:
    """How much of a graph's first calls the floor may spend measuring."""

    warmup: int = 3  # untimed calls of each side before timing
    samples: int = 5  # timed calls of each side
    # Eager must be this much cheaper to take over: noise must not send a good
    # graph back to eager, and a kept graph is at worst 0.97x eager.
    margin: float = 0.03


class EagerFloor:
    """The measurement and the choice of one compiled graph (Note [Eager is
    the floor]). ``choice`` is None while measuring, then "compiled" or
    "eager"."""

    def __init__(
        self,
        name: str,
        cache_file: str | None,
        settings: FloorSettings = FloorSettings(),
        timer: Any = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self._timer = timer if timer is not None else CudaCallTimer()
        self.choice: str | None = None
        self.compiled_ms: float | None = None
        self.eager_ms: float | None = None
        self.from_cache = False
        self._cache_file = cache_file
        self._untimed = {COMPILED: 0, EAGER: 0}
        self._timed: list[tuple[str, Any]] = []  # (side, the timer's record)
        self._shapes: list[tuple[int, ...] | None] | None = None
        self._next = COMPILED
        self._load()

    def describe(self) -> str:
        """One line for explain(): what the floor measured and chose."""
        if self.choice is None:
            done = sum(1 for side, _ in self._timed if side == EAGER)
            return f"eager floor: measuring ({done} of {self.settings.samples} eager calls timed)"
        source = " (cached)" if self.from_cache else ""
        if self.compiled_ms is None or self.eager_ms is None:
            return f"eager floor: runs {self.choice}{source}"
        return (
            f"eager floor: compiled {self.compiled_ms:.3f} ms, eager {self.eager_ms:.3f} ms "
            f"per call: runs {self.choice}{source}"
        )

    def call(self, args: list[Any], compiled: BoxedCall, eager: BoxedCall) -> list[Any]:
        """One call: measured while the choice is open, then the chosen side."""
        if self.choice is None:
            return self.run(args, compiled, eager)
        return eager(args) if self.choice == EAGER else compiled(args)

    def run(self, args: list[Any], compiled: BoxedCall, eager: BoxedCall) -> list[Any]:
        """One call while the choice is open: one side computes the outputs."""
        if not self._timer.can_time():
            return compiled(args)
        # The compiled side warms up first: a program's first few calls run
        # what it compiled, as they would without the floor.
        for side in (COMPILED, EAGER):
            if self._untimed[side] < self.settings.warmup:
                self._untimed[side] += 1
                return self._call(side, args, compiled, eager)
        side = self._next
        if self._have_all_samples():
            self._decide_when_done()
            return compiled(args)
        shapes = _shapes_of(args)
        if self._shapes is None:
            self._shapes = shapes
        elif shapes != self._shapes:
            return compiled(args)
        self._next = EAGER if side == COMPILED else COMPILED
        started = self._timer.start(args)
        outputs = self._call(side, args, compiled, eager)
        if self.choice is None:  # else eager failed and the choice is made
            self._timed.append((side, self._timer.stop(started, outputs)))
        return outputs

    def _call(self, side: str, args: list[Any], compiled: BoxedCall, eager: BoxedCall) -> list[Any]:
        if side == COMPILED:
            return compiled(args)
        inputs = list(args)  # eager clears the boxed list; a failure needs the inputs back
        try:
            return eager(args)
        except Exception as error:  # the compiled graph stays the floor's choice
            log.debug(
                "%s: eager run failed while measuring (%s); keeping compiled", self.name, error
            )
            self._settle(COMPILED, None, None)
            args[:] = inputs
            return compiled(args)

    def _have_all_samples(self) -> bool:
        eager = sum(1 for side, _ in self._timed if side == EAGER)
        return eager >= self.settings.samples and len(self._timed) >= 2 * self.settings.samples

    def _decide_when_done(self) -> None:
        if not self._timer.ready(self._timed[-1][1]):
            return
        costs: dict[str, list[float]] = {COMPILED: [], EAGER: []}
        for side, timed in self._timed:
            costs[side].append(self._timer.cost_ms(timed))
        compiled_ms = statistics.median(costs[COMPILED])
        eager_ms = statistics.median(costs[EAGER])
        wins = eager_ms < compiled_ms * (1.0 - self.settings.margin)
        self._settle(EAGER if wins else COMPILED, compiled_ms, eager_ms)
        self._save()

    def _settle(self, choice: str, compiled_ms: float | None, eager_ms: float | None) -> None:
        self.choice, self.compiled_ms, self.eager_ms = choice, compiled_ms, eager_ms
        self._timed.clear()  # the timer's records (CUDA events) are no longer needed
        self._timer.close()
        log.info("%s: %s", self.name, self.describe())

    def _load(self) -> None:
        if self._cache_file is None or not os.path.exists(self._cache_file):
            return
        try:
            with open(self._cache_file, encoding="utf-8") as file:
                saved = json.load(file)
            if saved.get("version") != _FILE_VERSION or saved["choice"] not in (COMPILED, EAGER):
                raise ValueError(f"unexpected content {saved!r}")
        except (OSError, ValueError, KeyError, TypeError) as error:
            warn_once(
                f"eager-floor-file:{self._cache_file}",
                f"mybackend: ignoring the eager floor's unreadable choice file "
                f"{self._cache_file} ({error}); graph {self.name} is measured again",
            )
            return
        self.from_cache = True
        self.choice = saved["choice"]
        self.compiled_ms, self.eager_ms = saved.get("compiled_ms"), saved.get("eager_ms")

    def _save(self) -> None:
        if self._cache_file is None:
            return
        saved = {
            "version": _FILE_VERSION,
            "graph": self.name,
            "choice": self.choice,
            "compiled_ms": self.compiled_ms,
            "eager_ms": self.eager_ms,
        }
        error = write_atomically(self._cache_file, json.dumps(saved).encode(), folder_mode=0o700)
        if error is not None:  # an unwritable cache costs a measurement next time
            log.debug("%s: could not save the eager-floor choice (%s)", self.name, error)


def _shapes_of(args: Sequence[Any]) -> list[tuple[int, ...] | None]:
    return [tuple(a.shape) if isinstance(a, torch.Tensor) else None for a in args]


@dataclasses.dataclass(frozen=True)
class FloorInputs:
    """What of a graph's example inputs keys its choice: their shapes and the
    CUDA device they are on. Plain data, so that a warm-started graph finds
    its choice without example inputs (GraphRecipe in mybackend/warm_start.py)."""

    shapes: tuple[tuple[int, ...] | None, ...]
    device: str | None  # the first CUDA input's device; None: no input on CUDA

    @classmethod
    def of(cls, example_inputs: Sequence[Any]) -> FloorInputs:
        device = next(
            (t.device for t in example_inputs if isinstance(t, torch.Tensor) and t.is_cuda), None
        )
        return cls(tuple(_shapes_of(example_inputs)), None if device is None else str(device))


def floor_cache_file(
    cache_root: str | None, graph_text: str, example_inputs: Sequence[Any], options_key: str
) -> str | None:
    """Where the choice of one graph lives, or None without a disk cache."""
    return floor_cache_path(cache_root, graph_text, FloorInputs.of(example_inputs), options_key)


def floor_cache_path(
    cache_root: str | None, graph_text: str, inputs: FloorInputs, options_key: str
) -> str | None:
    """floor_cache_file from the inputs' key alone."""
    if not cache_root:
        return None
    gpu = torch.cuda.get_device_name(inputs.device) if inputs.device is not None else "cpu"
    key = hashlib.sha256()
    # The shapes as a list, as the key was first written: earlier choices stay found.
    for part in (graph_text, repr(list(inputs.shapes)), gpu, torch.__version__,
                 extension_build(), options_key):  # fmt: skip
        key.update(part.encode())
        key.update(b"\0")
    return os.path.join(cache_root, "eager-floor", key.hexdigest()[:32] + ".json")


def runs_on_cuda(example_inputs: Sequence[Any]) -> bool:
    """The floor times CUDA graphs only: on a CPU, mybackend runs ATen anyway."""
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
