"""HTML rendering of an ExplainReport, for Jupyter (``_repr_html_``).

One section per graph: a summary line, a table of partitions (nodes, op
classes, kernel kinds and the fusion's reason), a table of the nodes outside
partitions (op, reason, the user's source line), compile time per stage, the
CUDA-graph status, run counters and accuracy_check's results.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import TYPE_CHECKING, Any

from mybackend.reports import GraphRecord, fallbacks_of, graph_accuracy, graph_stats, kernel_source

if TYPE_CHECKING:
    from mybackend.explain import ExplainReport

STYLE = (
    "<style>.mb-report table{border-collapse:collapse;margin:4px 0 10px 0}"
    ".mb-report th,.mb-report td{border:1px solid #ccc;padding:2px 6px;text-align:left;"
    "vertical-align:top;font-size:12px}.mb-report th{background:#f2f2f2}"
    ".mb-bad{background:#fde0e0}</style>"
)


def table(headers: list[str], rows: list[list[Any]], row_classes: list[str] | None = None) -> str:
    """An HTML table; cells are escaped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        css = row_classes[index] if row_classes else ""
        cells = "".join(f"<td>{escape(str(c))}</td>" for c in row)
        body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def report_html(report: ExplainReport) -> str:
    """The whole report as HTML."""
    summary = escape(report.format().split("\n", 1)[0])
    sections = [graph_html(g) for g in report.graphs]
    return f'<div class="mb-report">{STYLE}<p><b>{summary}</b></p>{"".join(sections)}</div>'


def graph_html(record: GraphRecord) -> str:
    """The section of one graph."""
    parts = [f"<h4>{escape(record.name)} ({escape(record.kind)})</h4>"]
    times = ", ".join(f"{s} {t * 1e3:.2f} ms" for s, t in record.stage_times)
    if times:
        parts.append(f"<p>compile time per stage: {escape(times)}</p>")
    report = record.core_report
    if report is None:
        parts.append(f"<p class='mb-bad'>runs eagerly: {escape(str(record.fallback_reason))}</p>")
        if record.repro_path:
            parts.append(f"<p>reproducer: <code>{escape(record.repro_path)}</code></p>")
        return "".join(parts)
    parts.append(_partitions_table(report))
    parts.append(_fallbacks_table(record))
    parts.append(f"<p>CUDA graphs: {escape(str(report['cuda_graphs']))}</p>")
    stats = graph_stats(record)
    if stats:
        parts.append(table(list(stats), [list(stats.values())]))
    parts.append(_accuracy_table(graph_accuracy(record)))
    return "".join(parts)


def _partitions_table(report: dict[str, Any]) -> str:
    nodes = report["nodes"]
    rows = []
    for index, members in enumerate(report["partitions"]):
        classes = Counter(nodes[n]["op_class"] for n in members)
        kernels = [k for k in report["kernels"] if k["partition"] == index]
        rows.append(
            [
                index,
                ", ".join(nodes[n]["name"] for n in members),
                ", ".join(f"{c} x{k}" for c, k in sorted(classes.items())),
                ", ".join(k["kind"] for k in kernels),
                "; ".join(sorted({k.get("why", "") for k in kernels} - {""})),
                "yes" if any(kernel_source(k) for k in kernels) else "no",
            ]
        )
    headers = ["partition", "nodes", "op classes", "kernels", "why", "generated source"]
    return table(headers, rows)


def _fallbacks_table(record: GraphRecord) -> str:
    fallbacks = fallbacks_of(record)
    if not fallbacks:
        return "<p>every node runs in a partition</p>"
    rows = [[n["name"], n["op"], n["reason"], n["source"]] for n in fallbacks]
    return "<p>nodes outside partitions:</p>" + table(
        ["node", "op", "reason", "source"], rows, ["mb-bad"] * len(rows)
    )


def _accuracy_table(results: list[dict[str, Any]]) -> str:
    if not results:
        return ""
    rows, classes = [], []
    for r in results:
        if r.get("error"):
            rows.append([r["partition"], "not checked", "", "", r["error"]])
            classes.append("")
            continue
        verdict = "EXCEEDED" if r["exceeded"] else "ok"
        rows.append([r["partition"], f"{r['max_rel_error']:.3g}", f"{r['rtol']:.3g}",
                     verdict, f"{r['dtype']}, worst at {r['worst_node']}"])  # fmt: skip
        classes.append("mb-bad" if r["exceeded"] else "")
    headers = ["partition", "worst relative error", "tolerance", "verdict", "detail"]
    return "<p>accuracy check:</p>" + table(headers, rows, classes)
