"""The partition map: a graph drawn with the core's partitions coloured.

Every FX node of an ATen graph becomes a DOT node; the nodes of partition
``i`` sit in a filled cluster labelled with the kernel kinds it became, and
nodes that run outside partitions are drawn red with their reason as the
tooltip. ``PartitionMap.dot`` is always available; ``svg()`` renders it with
the ``graphviz`` Python package or, failing that, the ``dot`` binary.
In Jupyter the map shows inline (SVG when it can render, DOT text otherwise).
"""

from __future__ import annotations

import dataclasses
import html
import shutil
import subprocess
from typing import Any

import torch.fx

from mybackend.reports import GraphRecord

PALETTE = (
    "#cfe8fc", "#d5f5d5", "#fde9c8", "#e8dcfb", "#fbd9e8",
    "#d9f3f0", "#f3f0c8", "#e0e0f8", "#f8e0d0", "#dcefdc",
)  # fmt: skip
FALLBACK_COLOUR = "#f4a6a6"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class RenderError(RuntimeError):
    """No graphviz renderer is installed (neither the Python package nor ``dot``)."""


def render_svg(dot: str) -> str:
    """Renders DOT text to SVG; raises RenderError when graphviz is missing."""
    try:
        import graphviz

        return str(graphviz.Source(dot).pipe(format="svg", encoding="utf-8"))
    except ImportError:
        pass
    binary = shutil.which("dot")
    if binary is None:
        raise RenderError(
            "rendering the partition map needs graphviz: install the `graphviz` Python "
            "package with the graphviz binaries, or put `dot` on PATH (PartitionMap.dot "
            "holds the DOT text either way)"
        )
    done = subprocess.run(
        [binary, "-Tsvg"], input=dot, capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise RenderError(f"dot failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


@dataclasses.dataclass
class PartitionMap:
    """One graph's partition map: DOT text, SVG on request, Jupyter reprs."""

    name: str
    dot: str

    def svg(self) -> str:
        """The map as SVG text (needs graphviz; see render_svg)."""
        return render_svg(self.dot)

    def _repr_svg_(self) -> str | None:
        try:
            return self.svg()
        except RenderError:
            return None

    def _repr_html_(self) -> str:
        svg = self._repr_svg_()
        if svg is not None:
            return f"<div><b>{html.escape(self.name)}</b>{svg}</div>"
        return (
            f"<div><b>{html.escape(self.name)}</b> (install graphviz to draw it; DOT text):"
            f"<pre>{html.escape(self.dot)}</pre></div>"
        )

    def __str__(self) -> str:
        return self.dot


def partition_map(record: GraphRecord) -> PartitionMap:
    """The partition map of one compiled graph (see the module docstring)."""
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
    return PartitionMap(record.name, "\n".join(lines) + "\n")


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
