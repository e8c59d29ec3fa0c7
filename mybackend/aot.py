"""Stage 2: aot_autograd, and the compiler it calls for each ATen graph.

Training graphs are split into forward and backward by the min-cut
rematerialization partitioner; graphs that need no gradient (no_grad,
inference_mode, or no input requiring grad) arrive once, as "inference".
Each ATen graph is lowered to the IR and compiled by the C++ core; a graph
that fails to compile runs eagerly (warned once) unless strict mode is on.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

from mybackend import _C
from mybackend._logging import get_logger, warn_once
from mybackend.compiled import CompiledGraphFunction, EagerGraphFunction
from mybackend.decompositions import decomposition_table
from mybackend.lowering import lower
from mybackend.options import Options
from mybackend.reports import GraphRecord, publish

log = get_logger("aot")
_graph_ids = itertools.count()


def compile_with_aot(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options
) -> Callable[..., Any]:
    """Runs aot_autograd on a dynamo graph with our compiler for every part."""
    graph_id = next(_graph_ids)

    def compiler(kind: str) -> Callable[..., Any]:
        return functools.partial(
            compile_aten_graph, name=f"graph{graph_id}.{kind}", kind=kind, options=options
        )

    return aot_module_simplified(
        gm,
        example_inputs,
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    name: str,
    kind: str,
    options: Options,
) -> Callable[..., Any]:
    """Lowers and compiles one ATen graph; falls back to eager on failure."""
    stage_times: list[tuple[str, float]] = []
    ir_text = ""
    try:
        start = time.perf_counter()
        lowered = lower(gm, example_inputs)
        stage_times.append(("lowering", time.perf_counter() - start))
        ir_text = lowered.graph.to_text(True)
        core_options = options.core_options(static_input_indices(kind))
        core = _C.compile(lowered.graph, core_options, lowered.run_python_node)
    except Exception as error:
        if options.strict:
            raise
        reason = f"{type(error).__name__}: {error}"
        warn_once(
            f"compile:{reason}",
            f"mybackend: could not compile {name} ({reason}); it runs eagerly. "
            "Pass options={'strict': True} to raise instead.",
        )
        publish(GraphRecord(name, kind, ir_text, None, stage_times, fallback_reason=reason))
        return EagerGraphFunction(gm)
    report = core.report()
    stage_times.extend(report["stage_times"])
    compiled = CompiledGraphFunction(name, lowered, core, gm, options)
    record = GraphRecord(name, kind, ir_text, report, stage_times, compiled=compiled)
    publish(record)
    _dump(record, options)
    log.debug("compiled %s: %d partitions", name, len(report["partitions"]))
    return compiled


def static_input_indices(kind: str) -> list[int]:
    """Inputs aot_autograd marks static (parameters, buffers): CUDA graphs
    capture them at their own address instead of copying them per call."""
    if kind == "backward":
        return []
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    return list(getattr(metadata, "static_input_indices", None) or [])


def _dump(record: GraphRecord, options: Options) -> None:
    folder = options.dump_dir or os.environ.get("MYBACKEND_DUMP_DIR")
    if not folder:
        return
    from mybackend.explain import format_graph_record

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{record.name}.ir.txt").write_text(record.ir_text)
    (path / f"{record.name}.report.txt").write_text(format_graph_record(record))
