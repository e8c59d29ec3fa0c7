"""Per-stage dumps of each compiled graph (option dump_dir / MYBACKEND_DUMP_DIR).

For a graph named ``graph0.forward`` the folder gets:

- ``graph0.forward.aten.py``: the ATen FX graph aot_autograd produced (stage 2),
- ``graph0.forward.ir.txt``: the IR with FX names and source lines (stage 3),
- ``graph0.forward.plan.json``: partitions, dropped nodes, schedule, per-node
  support decisions, kernel groups with the fusion's reason for each choice
  and their generated source when the core reports one (stages 5-7),
- ``graph0.forward.kernels.txt``: the kernel groups, readable, with sources,
- ``graph0.forward.partition_map.dot``: the partition map (graphviz DOT),
- ``graph0.forward.report.txt``: the explain() section of the graph.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mybackend.options import Options
from mybackend.reports import GraphRecord

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
        source = kernel_source(kernel)
        if source:
            lines.append("  source:")
            lines.extend("    " + line for line in source.splitlines())
    return "\n".join(lines) + "\n"


def dump_graph(record: GraphRecord, options: Options) -> None:
    """Writes every stage's output of one compiled graph to the dump folder."""
    folder = options.dump_folder()
    if not folder:
        return
    from mybackend.debug.partition_map import partition_map
    from mybackend.explain import format_graph_record

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    stem = record.name
    if record.gm is not None:
        code = record.gm.print_readable(print_output=False)
        (path / f"{stem}.aten.py").write_text(code)
    (path / f"{stem}.ir.txt").write_text(record.ir_text)
    if record.core_report is not None:
        (path / f"{stem}.plan.json").write_text(
            json.dumps(record.core_report, indent=1, default=str)
        )
        (path / f"{stem}.kernels.txt").write_text(format_kernels(record.core_report))
        (path / f"{stem}.partition_map.dot").write_text(partition_map(record).dot)
    (path / f"{stem}.report.txt").write_text(format_graph_record(record) + "\n")
