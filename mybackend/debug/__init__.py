"""Debugging tools, one idea per module (docs/debugging.md):

- ``partition_map``: the graph drawn with partitions coloured (DOT/SVG),
- ``html``: the explain report as HTML for Jupyter,
- ``dumps``: per-stage dumps (dump_dir / MYBACKEND_DUMP_DIR),
- ``repro``: standalone reproducers of compile failures,
- ``accuracy``: accuracy_check, each partition against eager ATen,
- ``background``: background_compile, compiling on a worker thread,
- ``tracing``: TORCH_LOGS and TORCH_TRACE (tlparse) integration.
"""

from __future__ import annotations

from mybackend.debug.partition_map import PartitionMap, RenderError

__all__ = ["PartitionMap", "RenderError"]
