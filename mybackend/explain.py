"""explain(): what mybackend did with a model, as a report object.

The report lists, per ATen graph: its partitions and the kernel groups each
became (kind, the fusion's reason, generated source on request), every node
outside a partition with its reason and the user's source line, compile time
per stage (and where the explained call's time went: dynamo, aot_autograd's
stages, mybackend's; compile_times.py), run counters (the core's stats():
calls, CUDA-graph captures and replays, and any cache counters the core
adds), the CUDA-graph status and why, and accuracy_check's results.
``str()`` is plain text, ``_repr_html_`` is a table for Jupyter,
``to_dict()`` is for scripts, and ``partition_map()`` draws a graph.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import torch

from mybackend import _C, compile_times
from mybackend.backend import mybackend_backend
from mybackend.debug.html import report_html
from mybackend.debug.partition_map import PartitionMap, partition_map
from mybackend.reports import (
    GraphRecord,
    collecting,
    fallbacks_of,
    format_graph_record,
    format_kernels,
    graph_accuracy,
    graph_dict,
)


@dataclasses.dataclass
class ExplainReport:
    """Per compiled graph: nodes, partitions, fallbacks with reasons, kernels, times."""

    graphs: list[GraphRecord]
    # Generated-kernel cache activity during the explained call: memory_hits,
    # disk_hits, compiles, ... (all zero when no kernel was generated).
    kernel_cache: dict[str, int] = dataclasses.field(default_factory=dict)
    # Seconds of the explained call per stage (compile_times.breakdown): dynamo,
    # aot_autograd's stages, mybackend's, and the rest of the call.
    compile_times: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def graph_breaks(self) -> int:
        dynamo_graphs = {g.name.split(".")[0] for g in self.graphs}
        return max(len(dynamo_graphs) - 1, 0)

    def fallback_nodes(self) -> list[dict[str, Any]]:
        """Every node that runs outside the core's partitions, with its reason."""
        return [n for g in self.graphs for n in fallbacks_of(g)]

    def accuracy(self) -> list[dict[str, Any]]:
        """accuracy_check's result per partition (empty unless the option was on)."""
        return [r for g in self.graphs for r in graph_accuracy(g)]

    def partition_map(self, graph: int | str = 0) -> PartitionMap:
        """The partition map of one graph, by index or name (see mybackend.debug)."""
        return partition_map(self._graph(graph))

    def partition_maps(self) -> list[PartitionMap]:
        """The partition map of every compiled graph."""
        return [partition_map(g) for g in self.graphs if g.core_report is not None]

    def kernel_sources(self) -> str:
        """Every kernel group, with the generated source where the core has one."""
        return "\n".join(
            f"{g.name}\n{format_kernels(g.core_report)}" for g in self.graphs if g.core_report
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-serialisable) for scripts."""
        return {
            "graph_breaks": self.graph_breaks,
            "kernel_cache": dict(self.kernel_cache),
            "compile_times": dict(self.compile_times),
            "graphs": [graph_dict(g) for g in self.graphs],
        }

    def format(self, sources: bool = False) -> str:
        """Plain text; ``sources=True`` adds each generated kernel's source."""
        nodes = sum(len(g.core_report["nodes"]) for g in self.graphs if g.core_report)
        partitions = sum(len(g.core_report["partitions"]) for g in self.graphs if g.core_report)
        header = (
            f"mybackend.explain: {len(self.graphs)} graph(s), {self.graph_breaks} graph "
            f"break(s), {nodes} nodes, {partitions} partition(s), "
            f"{len(self.fallback_nodes())} node(s) outside partitions"
        )
        if self.kernel_cache:
            cache = self.kernel_cache
            header += (
                f"\nkernel cache: {cache.get('memory_hits', 0)} memory hit(s), "
                f"{cache.get('disk_hits', 0)} disk hit(s), {cache.get('compiles', 0)} compile(s)"
            )
            if cache.get("compiles", 0):
                header += (
                    f" ({cache.get('compile_us', 0) / 1e6:.2f} s of NVRTC over threads, in "
                    f"{cache.get('batch_wall_us', 0) / 1e6:.2f} s)"
                )
        if self.compile_times:
            header += "\n" + compile_times.format_breakdown(self.compile_times)
        sections = [format_graph_record(g, sources) for g in self.graphs]
        return "\n\n".join([header, *sections])

    def __str__(self) -> str:
        return self.format()

    def _repr_html_(self) -> str:
        return report_html(self)

    def _graph(self, key: int | str) -> GraphRecord:
        if isinstance(key, int):
            if not -len(self.graphs) <= key < len(self.graphs):
                raise IndexError(f"graph {key} out of range: the report has {len(self.graphs)}")
            return self.graphs[key]
        for graph in self.graphs:
            if graph.name == key:
                return graph
        names = ", ".join(g.name for g in self.graphs)
        raise KeyError(f"no graph named {key!r}; graphs: {names}")


def explain(
    model: Any,
    *inputs: Any,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> ExplainReport:
    """Compiles ``model`` with mybackend, runs it once on ``inputs``, and reports."""
    backend = functools.partial(mybackend_backend, mode=mode, options=options)
    compiled = torch.compile(model, backend=backend)
    before = _C.kernel_cache_stats()
    times_before = compile_times.snapshot()
    with collecting() as records:
        start = time.perf_counter()
        compiled(*inputs, **kwargs)
        seconds = time.perf_counter() - start
    times = compile_times.breakdown(times_before, compile_times.snapshot(), seconds, records)
    after = _C.kernel_cache_stats()
    cache = {key: after[key] - before.get(key, 0) for key in after}
    return ExplainReport(list(records), kernel_cache=cache, compile_times=times)
