"""The partition map: a graph drawn with the core's partitions coloured.

Its DOT text comes from partition_dot in mybackend/reports.py (every FX node a
DOT node, one filled cluster per partition, fallbacks red with their
reason). ``PartitionMap.dot`` is always available; ``svg()`` renders it with
the ``graphviz`` Python package or, failing that, the ``dot`` binary.
In Jupyter the map shows inline (SVG when it can render, DOT text otherwise).
"""

from __future__ import annotations

import dataclasses
import html
import shutil
import subprocess

from mybackend.reports import GraphRecord, partition_dot


class RenderError(RuntimeError):
    """No graphviz renderer is installed (neither the Python package nor ``dot``)."""


def render_svg(dot: str) -> str:
    """Renders DOT text to SVG; raises RenderError when graphviz is missing."""
    try:  # an optional dependency: the `dot` binary serves without it
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
    return PartitionMap(record.name, partition_dot(record))
