"""Per-stage dumps of each compiled graph (option dump_dir / MYBACKEND_DUMP_DIR).

For a graph named ``graph0.forward`` the folder gets:

- ``graph0.forward.aten.py``: the ATen FX graph aot_autograd produced (stage 2),
- ``graph0.forward.ir.txt``: the IR with FX names and source lines (stage 3),
- ``graph0.forward.plan.json``: partitions, dropped nodes, schedule, per-node
  support decisions, kernel groups with the fusion's reason for each choice
  and their generated source when the core reports one (stages 5-7),
- ``graph0.forward.kernels.txt``: the kernel groups, readable, with sources,
- ``graph0.forward.partition_map.dot``: the partition map (graphviz DOT),
- ``graph0.forward.report.txt``: the explain() section of the graph,
- ``graph0.forward.pass<k>.<name>.txt``: the graph after each graph pass that
  changed it, ``k`` its place in its list (Note [Passes as data]; also
  ``graph0.pass<k>...`` for the dynamo graph and ``graph0.joint.pass<k>...``
  for the joint graph).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.fx

from mybackend.options import Options
from mybackend.reports import GraphRecord, format_graph_record, format_kernels, partition_dot


def dump_graph(record: GraphRecord, options: Options) -> None:
    """Writes every stage's output of one compiled graph to the dump folder."""
    folder = options.dump_folder()
    if not folder:
        return
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
        (path / f"{stem}.partition_map.dot").write_text(partition_dot(record))
    (path / f"{stem}.report.txt").write_text(format_graph_record(record) + "\n")


def dump_pass(
    folder: str, graph: str, index: int, pass_name: str, gm: torch.fx.GraphModule
) -> None:
    """Writes the graph as it is after graph pass number ``index`` changed it.

    The graph's text, not its module's code: code would be generated for
    every pass, where the driver generates it once (Note [Passes as data]).
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{graph}.pass{index}.{pass_name}.txt").write_text(str(gm.graph))
