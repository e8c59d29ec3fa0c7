"""Per-graph compile records, collected for explain() and dumps."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass
class GraphRecord:
    """What happened to one ATen graph: the core's report, or why it fell back."""

    name: str  # e.g. "graph0.forward"
    kind: str  # "inference", "forward" or "backward"
    ir_text: str
    core_report: dict[str, Any] | None  # _C.CompiledGraph.report(); None if it fell back
    stage_times: list[tuple[str, float]]
    fallback_reason: str | None = None
    compiled: Any = None  # the CompiledGraphFunction, for its run counters
    gm: Any = None  # the ATen torch.fx.GraphModule, for the partition map
    repro_path: str | None = None  # the reproducer written when compiling failed


_sink: contextvars.ContextVar[list[GraphRecord] | None] = contextvars.ContextVar(
    "mybackend_report_sink", default=None
)


@contextlib.contextmanager
def collecting() -> Iterator[list[GraphRecord]]:
    """Collects the records of every graph compiled inside the block."""
    records: list[GraphRecord] = []
    token = _sink.set(records)
    try:
        yield records
    finally:
        _sink.reset(token)


def publish(record: GraphRecord) -> None:
    sink = _sink.get()
    if sink is not None:
        sink.append(record)
