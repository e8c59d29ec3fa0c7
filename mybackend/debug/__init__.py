"""Debugging tools users call, one idea per module (docs/debugging.md);
with mybackend.explain they sit above aot.py, and the hooks the pipeline
calls (dumps, reproducer writing, tracing, accuracy checks, background
compiles) below it, in mybackend/hooks/:

- ``partition_map``: the graph drawn with partitions coloured (DOT/SVG),
- ``html``: the explain report as HTML for Jupyter,
- ``repro``: what a reproducer script runs to compile its graph again.
"""

from __future__ import annotations

from mybackend.debug.partition_map import PartitionMap, RenderError

__all__ = ["PartitionMap", "RenderError"]
