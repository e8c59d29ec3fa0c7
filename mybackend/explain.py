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
from collections import Counter
from typing import Any

import torch

from mybackend import _C, compile_times
from mybackend.backend import mybackend_backend
from mybackend.debug.dumps import format_kernels, kernel_source
from mybackend.debug.partition_map import PartitionMap, partition_map
from mybackend.reports import GraphRecord, collecting


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
        from mybackend.debug.html import report_html

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


def fallbacks_of(record: GraphRecord) -> list[dict[str, Any]]:
    """The nodes of one graph that run outside partitions, with reason and graph name."""
    if record.core_report is None:
        return []
    dropped = dict(record.core_report["dropped"])
    out = []
    for node in record.core_report["nodes"]:
        if node["partition"] >= 0:
            continue
        reason = dropped.get(node["id"], node["reason"])
        out.append({**node, "graph": record.name, "reason": reason})
    return out


def graph_accuracy(record: GraphRecord) -> list[dict[str, Any]]:
    """accuracy_check's per-partition results of one graph ([] when not run)."""
    return list(getattr(record.compiled, "accuracy", None) or [])


def graph_stats(record: GraphRecord) -> dict[str, int]:
    """The run counters of one graph (calls, partitions run, CUDA-graph replays...)."""
    stats = getattr(record.compiled, "stats", None)
    return dict(stats()) if stats is not None else {}


def graph_dict(record: GraphRecord) -> dict[str, Any]:
    """One graph of ExplainReport.to_dict()."""
    report = record.core_report
    return {
        "name": record.name,
        "kind": record.kind,
        "fallback_reason": record.fallback_reason,
        "repro": record.repro_path,
        "stage_times": [list(t) for t in record.stage_times],
        "cuda_graphs": report["cuda_graphs"] if report else None,
        "memory_plan": report.get("memory_plan") if report else None,
        "stats": graph_stats(record),
        "fallback_nodes": fallbacks_of(record),
        "accuracy": graph_accuracy(record),
        "report": report,
        "ir": record.ir_text,
    }


def format_graph_record(record: GraphRecord, sources: bool = False) -> str:
    """The plain-text section of one graph in explain() and in dumps."""
    lines = [f"{record.name} ({record.kind})"]
    times = ", ".join(f"{stage} {seconds * 1e3:.2f} ms" for stage, seconds in record.stage_times)
    if times:
        lines.append(f"  compile time per stage: {times}")
    if record.core_report is None:
        lines.append(f"  runs eagerly: {record.fallback_reason}")
        if record.repro_path:
            lines.append(f"  reproducer: {record.repro_path}")
        return "\n".join(lines)
    report = record.core_report
    nodes = report["nodes"]
    lines.append(f"  {len(nodes)} nodes, {len(report['partitions'])} partition(s)")
    for index, members in enumerate(report["partitions"]):
        classes = Counter(nodes[n]["op_class"] for n in members)
        summary = ", ".join(f"{c} x{k}" for c, k in sorted(classes.items()))
        kernels = [k for k in report["kernels"] if k["partition"] == index]
        kinds = sorted({k["kind"] for k in kernels})
        lines.append(f"  partition {index}: {len(members)} nodes ({summary}) -> {', '.join(kinds)}")
        if sources:
            lines.extend(_source_lines(kernels))
    lines.extend(_fallback_lines(record))
    lines.append(f"  CUDA graphs: {report['cuda_graphs']}")
    if "memory_plan" in report:
        lines.append(memory_plan_line(report["memory_plan"]))
    stats = graph_stats(record)
    if stats:
        lines.append("  runs: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    lines.extend(_accuracy_lines(graph_accuracy(record)))
    return "\n".join(lines)


def memory_plan_line(plan: dict[str, Any]) -> str:
    """The runtime's memory plan of one graph in one line (Note [Memory plan])."""

    def mib(n: int) -> str:
        return f"{n / 2**20:.2f} MiB"

    text = f"  memory plan: {plan['points']} points; "
    if not plan["planned_values"]:
        return text + "no engine output with a static size to place"
    return text + (
        f"{plan['planned_values']} engine outputs in {plan['buffers']} buffers "
        f"({plan['reuses']} reuses): {mib(plan['bytes_with_reuse'])} with reuse, "
        f"{mib(plan['bytes_without_reuse'])} without, peak {mib(plan['peak_bytes'])} alive"
    )


def _source_lines(kernels: list[dict[str, Any]]) -> list[str]:
    lines = []
    for kernel in kernels:
        source = kernel_source(kernel)
        text = source if source else f"(no generated source: {kernel.get('why', kernel['kind'])})"
        lines.append(f"    {kernel['kind']} kernel:")
        lines.extend("      " + line for line in text.splitlines())
    return lines


def _fallback_lines(record: GraphRecord) -> list[str]:
    fallbacks = fallbacks_of(record)
    if not fallbacks:
        return []
    lines = ["  nodes outside partitions:"]
    for node in fallbacks:
        where = f"  [{node['source']}]" if node["source"] else ""
        lines.append(f"    {node['name']} {node['op']}: {node['reason']}{where}")
    return lines


def _accuracy_lines(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return []
    lines = ["  accuracy check (worst relative error vs eager, tolerance):"]
    for r in results:
        if r.get("error"):
            lines.append(f"    partition {r['partition']}: not checked ({r['error']})")
            continue
        verdict = "EXCEEDED" if r["exceeded"] else "ok"
        lines.append(
            f"    partition {r['partition']}: {r['max_rel_error']:.3g} "
            f"(tol {r['rtol']:.3g}, {r['dtype']}) {verdict}; worst at {r['worst_node']}"
        )
    return lines
