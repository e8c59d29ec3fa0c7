"""Per-graph compile records, collected for explain() and dumps."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

CoreReport = dict[str, Any]


@dataclasses.dataclass
class GraphRecord:
    """What happened to one ATen graph: the core's report, or why it fell back."""

    name: str  # e.g. "graph0.forward"
    kind: str  # "inference", "forward" or "backward"
    ir_text: str
    # _C.CompiledGraph.report(), or the function that makes it on first use
    # of ``core_report``; None if the graph fell back.
    report_source: CoreReport | Callable[[], CoreReport] | None
    stage_times: list[tuple[str, float]]
    fallback_reason: str | None = None
    compiled: Any = None  # the CompiledGraphFunction, for its run counters
    gm: Any = None  # the ATen torch.fx.GraphModule, for the partition map
    repro_path: str | None = None  # the reproducer written when compiling failed

    @property
    def core_report(self) -> CoreReport | None:
        """The core's report, made on first use: it says whether each
        generated kernel compiled, so it waits for the graph's kernels (Note
        [Kernels compiled beside the caller]), which a compile must not."""
        if callable(self.report_source):
            self.report_source = self.report_source()
        return self.report_source

    @property
    def has_core_report(self) -> bool:
        """True when the graph compiled (without making the report)."""
        return self.report_source is not None


# Note [Records from any thread]
# Graphs compile where they first run: a backward graph compiles inside
# autograd's engine, which runs CUDA work on its own device threads. A
# context variable set by the caller is invisible there, so the open sinks
# are process-wide: every block that is collecting sees every graph compiled
# while it is open, whichever thread compiles it.
_sinks: list[list[GraphRecord]] = []
_sinks_lock = threading.Lock()


@contextlib.contextmanager
def collecting() -> Iterator[list[GraphRecord]]:
    """Collects the records of every graph compiled while the block runs."""
    records: list[GraphRecord] = []
    with _sinks_lock:
        _sinks.append(records)
    try:
        yield records
    finally:
        with _sinks_lock:
            # by identity: two open blocks may hold equal lists
            del _sinks[next(i for i, sink in enumerate(_sinks) if sink is records)]


def publish(record: GraphRecord) -> None:
    with _sinks_lock:
        for sink in _sinks:
            sink.append(record)
