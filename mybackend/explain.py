"""explain(): what mybackend did with a model, as a report object."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Any

import torch

from mybackend.backend import mybackend_backend
from mybackend.reports import GraphRecord, collecting


@dataclasses.dataclass
class ExplainReport:
    """Per compiled graph: nodes, partitions, fallbacks with reasons, kernels, times."""

    graphs: list[GraphRecord]

    @property
    def graph_breaks(self) -> int:
        dynamo_graphs = {g.name.split(".")[0] for g in self.graphs}
        return max(len(dynamo_graphs) - 1, 0)

    def fallback_nodes(self) -> list[dict[str, Any]]:
        """Every node that runs outside the core's partitions, with its reason."""
        return [n for g in self.graphs for n in _fallbacks(g)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "graph_breaks": self.graph_breaks,
            "graphs": [
                {
                    "name": g.name,
                    "kind": g.kind,
                    "fallback_reason": g.fallback_reason,
                    "stage_times": g.stage_times,
                    "report": g.core_report,
                    "ir": g.ir_text,
                }
                for g in self.graphs
            ],
        }

    def __str__(self) -> str:
        nodes = sum(len(g.core_report["nodes"]) for g in self.graphs if g.core_report)
        partitions = sum(len(g.core_report["partitions"]) for g in self.graphs if g.core_report)
        header = (
            f"mybackend.explain: {len(self.graphs)} graph(s), {self.graph_breaks} graph "
            f"break(s), {nodes} nodes, {partitions} partition(s), "
            f"{len(self.fallback_nodes())} node(s) outside partitions"
        )
        return "\n\n".join([header, *(format_graph_record(g) for g in self.graphs)])


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
    with collecting() as records:
        compiled(*inputs, **kwargs)
    return ExplainReport(list(records))


def _fallbacks(record: GraphRecord) -> list[dict[str, Any]]:
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


def format_graph_record(record: GraphRecord) -> str:
    """The plain-text section of one graph in explain() and in dumps."""
    lines = [f"{record.name} ({record.kind})"]
    times = ", ".join(f"{stage} {seconds * 1e3:.2f} ms" for stage, seconds in record.stage_times)
    if times:
        lines.append(f"  compile time per stage: {times}")
    if record.core_report is None:
        lines.append(f"  runs eagerly: {record.fallback_reason}")
        return "\n".join(lines)
    report = record.core_report
    nodes = report["nodes"]
    lines.append(f"  {len(nodes)} nodes, {len(report['partitions'])} partition(s)")
    for index, members in enumerate(report["partitions"]):
        classes = Counter(nodes[n]["op_class"] for n in members)
        summary = ", ".join(f"{c} x{k}" for c, k in sorted(classes.items()))
        kinds = sorted({k["kind"] for k in report["kernels"] if k["partition"] == index})
        lines.append(f"  partition {index}: {len(members)} nodes ({summary}) -> {', '.join(kinds)}")
    fallbacks = _fallbacks(record)
    if fallbacks:
        lines.append("  nodes outside partitions:")
        for node in fallbacks:
            where = f"  [{node['source']}]" if node["source"] else ""
            lines.append(f"    {node['name']} {node['op']}: {node['reason']}{where}")
    return "\n".join(lines)
