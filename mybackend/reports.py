"""Per-graph compile records, collected for explain() and dumps, and their
text forms: the formatting helpers shared by the hooks the pipeline calls
(dumps, TORCH_TRACE artifacts) and the tools users call (explain(), its HTML
form, the partition map)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch.fx

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
    # The EagerFloor of the dynamo graph this graph was compiled for (Note
    # [Eager is the floor]); None: not measured.
    floor: Any = None

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


# Text and plain-data forms of a GraphRecord.

SOURCE_KEYS = ("source", "spec", "code")  # the CUDA C++ first, else the spec text


def kernel_source(kernel: dict[str, Any]) -> str | None:
    """The generated source or spec text of a kernel group, if the core gave one."""
    for key in SOURCE_KEYS:
        value = kernel.get(key)
        if value:
            return str(value)
    return None


def format_kernels(report: dict[str, Any]) -> str:
    """Every kernel group of a core report, with its nodes, choice and source."""
    names = [n["name"] for n in report["nodes"]]
    lines = []
    for index, kernel in enumerate(report["kernels"]):
        members = ", ".join(names[n] for n in kernel["nodes"])
        lines.append(f"kernel {index}: partition {kernel['partition']} -> {kernel['kind']}")
        lines.append(f"  nodes: {members}")
        if kernel.get("why"):
            lines.append(f"  why: {kernel['why']}")
        if kernel["kind"] == "matmul":  # a library call: its spec says what runs
            lines.append("  spec:")
            lines.extend("    " + line for line in kernel.get("spec", "").splitlines())
        if kernel.get("problem"):
            lines.append(f"  last fell back to ATen: {kernel['problem']}")
        if kernel.get("floor"):  # Note [A group is timed against its ATen form]
            lines.append(f"  {kernel['floor']}")
        source = kernel_source(kernel)
        if source:
            lines.append("  source:")
            lines.extend("    " + line for line in source.splitlines())
    return "\n".join(lines) + "\n"


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


def graph_host_times(record: GraphRecord) -> list[tuple[str, int, float]]:
    """Host time of one graph's calls by step label, (label, calls,
    microseconds) each; empty unless compiled with MYBACKEND_HOST_TIMES=1
    (Note [Host time by step] in src_cpp/runtime/host_times.h)."""
    host_times = getattr(record.compiled, "host_times", None)
    return list(host_times()) if host_times is not None else []


def host_times_by_label(records: Sequence[GraphRecord]) -> dict[str, tuple[int, float]]:
    """graph_host_times of several graphs summed per label: (calls, microseconds)."""
    totals: dict[str, tuple[int, float]] = {}
    for record in records:
        for label, calls, us in graph_host_times(record):
            before = totals.get(label, (0, 0.0))
            totals[label] = (before[0] + calls, before[1] + us)
    return totals


_KERNEL_ENTRY = re.compile(r"mb_[a-z_]+?_[0-9a-f]{16}")


def kernel_groups(records: Sequence[GraphRecord]) -> dict[str, str]:
    """Each generated kernel's entry name (``mb_pointwise_<hash>``, as a
    profiler names the kernel, less a ``_partials`` or ``_totals`` suffix)
    -> its group: the kind and the operators of its nodes, in plan order."""
    groups: dict[str, str] = {}
    for record in records:
        report = record.core_report if record.has_core_report else None
        if report is None:
            continue
        nodes = report["nodes"]
        for kernel in report["kernels"]:
            ops = " ".join(
                nodes[n]["op"].removeprefix("aten::").removesuffix(".default")
                for n in kernel["nodes"]
            )
            for name in _KERNEL_ENTRY.findall(str(kernel.get("kernel", ""))):
                groups.setdefault(name, f"{kernel['kind']}: {ops}")
    return groups


def kernel_group_of(kernel_name: str, groups: dict[str, str]) -> str:
    """The group of a profiled kernel name (kernel_groups), or ''."""
    found = _KERNEL_ENTRY.match(kernel_name)
    return groups.get(found.group(0), "") if found else ""


def graph_floor(record: GraphRecord) -> str | None:
    """What the eager floor measured and chose for one graph (None: not measured)."""
    return None if record.floor is None else str(record.floor.describe())


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
        "eager_floor": graph_floor(record),
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
    if (floor := graph_floor(record)) is not None:
        lines.append(f"  {floor}")
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


# The partition map's DOT text: every FX node of an ATen graph a DOT node; the
# nodes of partition ``i`` in a filled cluster labelled with the kernel kinds
# it became, nodes that run outside partitions red with their reason as the
# tooltip (mybackend.debug.partition_map renders it).

PALETTE = (
    "#cfe8fc", "#d5f5d5", "#fde9c8", "#e8dcfb", "#fbd9e8",
    "#d9f3f0", "#f3f0c8", "#e0e0f8", "#f8e0d0", "#dcefdc",
)  # fmt: skip


FALLBACK_COLOUR = "#f4a6a6"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def partition_dot(record: GraphRecord) -> str:
    """The partition map of one compiled graph as DOT text (see the module docstring)."""
    report = record.core_report
    if report is None:
        raise ValueError(
            f"{record.name} was not compiled ({record.fallback_reason}): no partitions"
        )
    dropped = dict(report["dropped"])
    by_name = {
        n["name"]: {**n, "reason": dropped.get(n["id"], n["reason"])} for n in report["nodes"]
    }
    kinds: dict[int, set[str]] = {}
    for kernel in report["kernels"]:
        kinds.setdefault(kernel["partition"], set()).add(kernel["kind"])
    lines = [
        f"digraph {_quote(record.name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica", '
        "fontsize=10];",
    ]
    fx_nodes = list(record.gm.graph.nodes) if record.gm is not None else []
    names = [n.name for n in fx_nodes] or list(by_name)
    for index, members in enumerate(report["partitions"]):
        lines.extend(_cluster(index, members, report, sorted(kinds.get(index, ()))))
    for name in names:
        if name in by_name and by_name[name]["partition"] >= 0:
            continue  # drawn in its cluster
        lines.append("  " + _outside_node(name, by_name.get(name), fx_nodes))
    for node in fx_nodes:
        for user in node.users:
            lines.append(f"  {_quote(node.name)} -> {_quote(user.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cluster(index: int, members: list[int], report: dict[str, Any], kinds: list[str]) -> list[str]:
    colour = PALETTE[index % len(PALETTE)]
    label = f"partition {index}: {', '.join(kinds) or 'no kernels'}"
    lines = [
        f"  subgraph cluster_p{index} {{",
        f'    label={_quote(label)}; style="rounded,filled"; fillcolor="{colour}"; '
        'color="#666666"; fontsize=10;',
    ]
    for member in members:
        node = report["nodes"][member]
        text = f"{node['name']}\n{node['op']}"
        tooltip = node["source"] or node["op"]
        lines.append(
            f'    {_quote(node["name"])} [label={_quote(text)}, fillcolor="{colour}", '
            f"tooltip={_quote(tooltip)}];"
        )
    lines.append("  }")
    return lines


def _outside_node(name: str, node: dict[str, Any] | None, fx_nodes: list[torch.fx.Node]) -> str:
    if node is not None:  # an IR node the core did not claim: a fallback
        text = f"{name}\n{node['op']}\nfallback: {node['reason']}"
        tooltip = node["reason"] + (f" [{node['source']}]" if node["source"] else "")
        return (
            f'{_quote(name)} [label={_quote(text)}, fillcolor="{FALLBACK_COLOUR}", '
            f'color="#c00000", penwidth=2, tooltip={_quote(tooltip)}];'
        )
    op = next((n.op for n in fx_nodes if n.name == name), "")
    shape = {"placeholder": "ellipse", "output": "doubleoctagon", "get_attr": "ellipse"}
    style = 'style="filled", fillcolor="#eeeeee"' if op in shape else ""
    return f"{_quote(name)} [shape={shape.get(op, 'box')}, {style or 'style=rounded'}];"
