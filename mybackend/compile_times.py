"""Where a compiling call's time goes: torch's stages and mybackend's, one table.

torch times its own compile stages in ``torch._dynamo.utils.
compilation_time_metrics`` (filled by ``dynamo_timed`` whether or not logging
is on). aot_autograd does not time its partitioner, so mybackend times the
partitioner it passes in, and its own compile of each ATen graph. ``snapshot``
reads all of these process-wide totals; ``breakdown`` turns the difference of
two snapshots around one call into stages that add up to the call's time.
explain() reports it, and ``benchmarks.compile_breakdown`` prints it for a
training step.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mybackend import _C
from mybackend.passes.pipeline import PASS_NAMES

PARTITION = "aot_autograd partition"
DYNAMO_STAGE = "dynamo (bytecode tracing, guards)"
WARM_STAGE = "warm start"  # a loaded graph's stage time: its IR rebuilt from the cache
CORE_PLANNING = "mybackend core: planning (capability, partition, fusion)"
CORE_RUNTIME = "mybackend core: codegen and runtime (kernel compiles started, executor)"
KERNEL_WAIT = "mybackend: waiting for kernel compiles"
_TORCH = "torch:"  # prefix of torch's own timers in a snapshot
_MYBACKEND = "mybackend:"  # prefix of mybackend's per-graph compile totals, by graph kind

# Stages mybackend measures itself, process-wide (backward graphs compile on
# autograd's threads: Note [Records from any thread] in reports.py).
_seconds: defaultdict[str, float] = defaultdict(float)
_lock = threading.Lock()


@contextlib.contextmanager
def timed(stage: str) -> Iterator[None]:
    """Adds the block's wall time to ``stage``'s process-wide total."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        with _lock:
            _seconds[stage] += elapsed


# Note [Compile counters]
# How many times each compile step ran in this process, whatever it took.
# Tests assert what a compile did by these (warm start: no trace, no
# lowering, no plan), never by time (Note [Tests assert behaviour, never
# time] in tests/testing.py). aot_autograd calls mybackend's compilers only
# after it traced the graph, so AOT_COMPILES counts traced graphs as seen
# from here.
AOT_COMPILES = "aten graphs compiled"  # our compiler called by aot_autograd
JOINT_PARTITIONS = "joint graphs partitioned"  # our partition_fn called
LOWERINGS = "graphs lowered"  # the compiler's lower(): FX graph -> IR
CORE_PLANS = "core plans"  # _C.compile: verify, capability, partition, fusion, codegen, runtime
CORE_PLAN_LOADS = "core plans loaded"  # _C.compile_planned: verify, load_plan, codegen, runtime
WARM_SAVES = "warm start: graphs serialized"
WARM_LOADS = "warm start: graphs loaded"
WARM_REJECTS = "warm start: entries rejected"  # corrupt or foreign payloads
_counts: Counter[str] = Counter()


def count(event: str, times: int = 1) -> None:
    """Adds to one of the process-wide compile counters (Note [Compile counters])."""
    with _lock:
        _counts[event] += times


def counts() -> dict[str, int]:
    """The compile counters so far, by event (absent: never happened)."""
    with _lock:
        return dict(_counts)


def timed_graph_compile(kind: str) -> contextlib.AbstractContextManager[None]:
    """Times mybackend's compile of one ATen graph of ``kind`` (forward, ...)."""
    return timed(_MYBACKEND + kind)


def snapshot() -> dict[str, float]:
    """Seconds spent so far in each timed stage, torch's and mybackend's."""
    totals: dict[str, float] = {}
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:  # a torch without dynamo's timers: mybackend's stages only
        compilation_time_metrics = {}
    for name, values in list(compilation_time_metrics.items()):
        totals[_TORCH + name] = float(sum(values))
    with _lock:
        totals.update(_seconds)
    # Runs that waited for generated kernels still compiling in the
    # background (Note [Kernels compiled beside the caller]).
    totals[KERNEL_WAIT] = _C.kernel_cache_stats().get("wait_us", 0) / 1e6
    return totals


def breakdown(
    before: dict[str, float],
    after: dict[str, float],
    call_seconds: float,
    records: Sequence[Any] = (),
) -> dict[str, float]:
    """Seconds per stage of one call, given snapshots taken around it.

    ``records`` are the GraphRecords the call published; their stage times
    split mybackend's part into lowering, the C++ core's planning stages and
    its runtime stage (the executor, which starts compiling the generated
    kernels in the background); the time runs waited for those compiles is
    a stage of its own. Stages that took no time are left out; "rest of the
    call" is what no timer covers: running the graphs, guard checks, Python
    around them.
    """

    def delta(key: str) -> float:
        return max(after.get(key, 0.0) - before.get(key, 0.0), 0.0)

    ours_in_aot = delta(_MYBACKEND + "forward") + delta(_MYBACKEND + "inference")
    ours_backward = delta(_MYBACKEND + "backward")
    metadata = delta(_TORCH + "aot_collect_metadata")
    joint = delta(_TORCH + "aot_trace_joint_graph")
    partition = delta(PARTITION)
    aot_total = delta(_TORCH + "create_aot_dispatcher_function")
    dynamo = delta(_TORCH + "_compile.compile_inner") - delta(
        _TORCH + "OutputGraph.call_user_compiler"
    )

    def record_seconds(wanted: Callable[[str], bool]) -> float:
        return float(sum(s for r in records for stage, s in r.stage_times if wanted(stage)))

    # The graph passes (mybackend/passes/pipeline.py) run just before lowering.
    lowering = record_seconds(lambda stage: stage == "lowering" or stage in PASS_NAMES)
    # A graph loaded from the warm-start cache: its IR rebuilt (Note [Warm start]).
    rebuilt = record_seconds(lambda stage: stage == WARM_STAGE)
    # The C++ codegen stage starts the generated kernels' compile (NVRTC, or
    # the disk cache), which the first run of the graph waits for if it is
    # not done (KERNEL_WAIT); the runtime stage builds the executor.
    runtime_stages = ("codegen", "runtime")
    runtime = record_seconds(lambda stage: stage in runtime_stages)
    planning = record_seconds(
        lambda stage: (
            stage not in ("lowering", *runtime_stages, WARM_STAGE) and stage not in PASS_NAMES
        )
    )
    stages = {
        DYNAMO_STAGE: max(dynamo, 0.0),
        "aot_autograd metadata": metadata,
        "aot_autograd joint trace (decompositions, functionalization)": joint,
        PARTITION: partition,
        "aot_autograd other": max(aot_total - metadata - joint - partition - ours_in_aot, 0.0),
        "aot_autograd lazy backward": max(
            delta(_TORCH + "backward._backward_impl") - ours_backward, 0.0
        ),
        "mybackend lowering": lowering,
        "mybackend warm start (IR rebuilt from the cache)": rebuilt,
        CORE_PLANNING: planning,
        CORE_RUNTIME: runtime,
        "mybackend other (reports)": max(
            ours_in_aot + ours_backward - lowering - planning - runtime, 0.0
        ),
        KERNEL_WAIT: delta(KERNEL_WAIT),
    }
    stages = {name: seconds for name, seconds in stages.items() if seconds > 0.0}
    stages["rest of the call"] = max(call_seconds - sum(stages.values()), 0.0)
    return stages


def format_breakdown(stages: dict[str, float]) -> str:
    """One line: the total, then each stage in seconds."""
    total = sum(stages.values())
    parts = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in stages.items())
    return f"compile time of the call: {total:.3f} s: {parts}"
