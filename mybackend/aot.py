"""Stage 2: aot_autograd, and the compiler it calls for each ATen graph.

Training graphs are split into forward and backward by the min-cut
rematerialization partitioner; graphs that need no gradient (no_grad,
inference_mode, or no input requiring grad) arrive once, as "inference".
The graph passes run at three points here (mybackend/passes/pipeline.py:
dynamo's graph, the joint graph, each ATen graph). Each ATen graph is then
lowered to the IR and compiled by the C++ core; a graph that fails to
compile runs eagerly (warned once) unless strict mode is on.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

from mybackend import _C, warm_start
from mybackend._logging import get_logger, warn_once
from mybackend.aot_logs import skipping_unread_graph_texts
from mybackend.compile_times import (
    AOT_COMPILES,
    CORE_PLANS,
    JOINT_PARTITIONS,
    LOWERINGS,
    PARTITION,
    count,
    timed,
    timed_graph_compile,
)
from mybackend.compiled import CompiledGraphFunction, EagerGraphFunction
from mybackend.decompositions import decomposition_table
from mybackend.distributed import count_aot_compile
from mybackend.gc_pause import collections_paused
from mybackend.hooks.background import BackgroundGraphFunction
from mybackend.hooks.dumps import dump_graph
from mybackend.hooks.reproducer import write_reproducer
from mybackend.hooks.tracing import emit_graph_artifacts
from mybackend.lowering import lower
from mybackend.lowering.graph_modules import keep_dynamo_metadata, new_graph_module
from mybackend.options import Options
from mybackend.passes.common_subexpressions import eliminate_common_subexpressions
from mybackend.passes.driver import DYNAMO, JOINT, PassContext, run_passes, selected
from mybackend.passes.fake_prop import copy_graph
from mybackend.passes.hoist import HoistedGraphFunction, HoistedValues
from mybackend.passes.pipeline import BEFORE_AOT, ON_JOINT, PER_GRAPH
from mybackend.reports import GraphRecord, publish

log = get_logger("aot")
_graph_ids = itertools.count()
# Part of the PARTITION stage: mybackend's joint-graph passes and
# common-subexpression pass, before torch's min cut. benchmarks.
# compile_breakdown shows it as a stage of its own.
JOINT_PASSES = "mybackend: joint-graph passes"


def compile_with_aot(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options
) -> Callable[..., Any]:
    """Runs aot_autograd on a dynamo graph with our compiler for every part."""
    graph_id = next(_graph_ids)
    ctx = PassContext(gm, list(example_inputs), DYNAMO, f"graph{graph_id}", options)
    if selected(BEFORE_AOT, ctx):  # a scan of call targets, far cheaper than a copy
        # Note [Recovery runs the user's program]: the caller's graph stays as
        # dynamo made it; the passes rewrite a copy.
        copied, _ = copy_graph(gm)
        ctx.gm = new_graph_module(gm, copied)
        rewritten = run_passes(BEFORE_AOT, ctx).gm  # Note [Passes as data]
        keep_dynamo_metadata(gm, rewritten)  # Note [Dynamo's metadata on a rewritten graph]
        gm = rewritten

    warm = warm_start.enabled(options)

    def compiler(kind: str) -> Callable[..., Any]:
        compile_fn = functools.partial(
            compile_aten_graph, name=f"graph{graph_id}.{kind}", kind=kind, options=options
        )
        return warm_start.serializable_compiler(compile_fn, kind) if warm else compile_fn

    settings = (
        warm_start.aot_cache_settings(options, f"graph{graph_id}")
        if warm
        else contextlib.nullcontext()
    )
    with skipping_unread_graph_texts(), settings:  # Note [Unread graph texts], [Warm start]
        compiled = aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            inference_compiler=compiler("inference"),
            decompositions=decomposition_table(example_inputs, gm),
            partition_fn=functools.partial(
                _partition, options=options, name=f"graph{graph_id}.joint"
            ),
            keep_inference_input_mutations=True,
        )
    count_aot_compile()  # Note [DDPOptimizer counts aot_autograd compiles]
    return compiled


def _partition(
    joint: torch.fx.GraphModule,
    joint_inputs: Any,
    *,
    options: Options,
    name: str = "joint",
    **kwargs: Any,
) -> Any:
    """The min-cut partitioner, after the joint graph's passes (ON_JOINT:
    the channels-last plan and matrix-product padding; planned before the
    split, forward and backward agree on the strides of every saved tensor:
    Note [Channels-last planning], Note [Aligned matrix products]). Timed:
    aot_autograd has no timer of its own for it, and it is a large part of
    compiling a training graph."""
    # Note [One recompile per joint graph]
    # Each pass of the joint graph returned a new GraphModule and recompiled
    # it at its end, before the min-cut partitioner's own first step, a
    # recompile: with plain modules, four code generations of ResNet-50's
    # 3000-node joint graph (0.75 s on the development machine). Nothing runs
    # the joint module in between (propagation walks its nodes), so the pass
    # driver leaves the final recompile to the partitioner. Under dynamo the
    # modules are lazy (Note [Graph modules made lazily]) and a recompile is
    # only a flag; the driver skips it all the same, for the callers outside
    # dynamo whose modules are plain.
    count(JOINT_PARTITIONS)  # Note [Compile counters]
    with timed(PARTITION):
        with timed(JOINT_PASSES):
            ctx = PassContext(joint, None, JOINT, name, options)
            joint = run_passes(ON_JOINT, ctx, recompile=False).gm
        return min_cut_partition(joint, joint_inputs, **kwargs)


def min_cut_partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
    """torch's min-cut partitioner after our common-subexpression pass, with
    its own off (Note [Our own common-subexpression pass])."""
    try:
        with timed(JOINT_PASSES):
            merged = eliminate_common_subexpressions(joint.graph)
    except Exception as error:  # each merge leaves a valid graph: torch's pass finishes
        log.debug("joint graph: our CSE failed (%s); torch's runs", error)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    if merged:
        log.debug("joint graph: %d common subexpressions merged", merged)
    # No recompile here: the partitioner's first step is one.
    with functorch_config.patch(cse=False):
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    name: str,
    kind: str,
    options: Options,
) -> Callable[..., Any]:
    """Lowers and compiles one ATen graph; falls back to eager on failure.

    With ``background_compile`` the work runs on a worker thread and the
    returned callable runs the graph eagerly until it is done.
    """
    count(AOT_COMPILES)  # aot_autograd traced this graph (Note [Compile counters])
    static_inputs = static_input_indices(kind)
    inputs = list(example_inputs)

    def compile_now() -> Callable[..., Any]:
        with timed_graph_compile(kind):
            return _compile_now(gm, inputs, name, kind, options, static_inputs)

    if options.background_compile:
        return BackgroundGraphFunction(name, gm, compile_now, strict=options.strict)
    # A backward graph compiles on autograd's first backward call, outside
    # the backend's own pause. Not for background compiles: the caller's
    # thread runs on meanwhile (Note [No cyclic collections while compiling]).
    with collections_paused():
        return compile_now()


def _compile_now(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    name: str,
    kind: str,
    options: Options,
    static_inputs: list[int],
) -> Callable[..., Any]:
    ir_text = ""
    ctx = PassContext(gm, example_inputs, kind, name, options, static_inputs)
    try:
        start = time.perf_counter()
        run_passes(PER_GRAPH, ctx)  # Note [Passes as data]
        count(LOWERINGS)  # Note [Compile counters]
        lowered = lower(ctx.gm, ctx.inputs())
        stage_times = ctx.stage_times()
        # A pass that changed nothing has no stage: its time counts as lowering.
        passes = sum(seconds for _, seconds in stage_times)
        stage_times.append(("lowering", time.perf_counter() - start - passes))
        ir_text = lowered.graph.to_text(True)
        core_options = options.core_options(ctx.static_inputs)
        count(CORE_PLANS)
        core = _C.compile(lowered.graph, core_options, lowered.run_python_node)
    except Exception as error:
        record = GraphRecord(name, kind, ir_text, None, ctx.stage_times(), gm=gm)
        return _fall_back(record, example_inputs, options, error)
    planned, hoist = ctx.gm, ctx.hoist
    stage_times.extend(core.stage_times())
    # The planned graph is what the core compiled: its eager run (fallback,
    # accuracy check) names the same nodes and computes the same values.
    compiled = CompiledGraphFunction(name, lowered, core, planned, options)
    record = GraphRecord(
        name, kind, ir_text, core.report, stage_times, compiled=compiled, gm=planned
    )
    compiled.record = record
    publish(record)
    _write_debug_outputs(record, options)
    if log.isEnabledFor(logging.DEBUG):  # the report waits for the kernels: only when read
        report = record.core_report or {}
        log.debug("compiled %s: %d partitions", name, len(report.get("partitions", ())))
    result: CompiledGraphFunction | HoistedGraphFunction = compiled
    if hoist is not None:
        result = HoistedGraphFunction(compiled, HoistedValues.from_plan(hoist))
    if warm_start.enabled(options):  # Note [Warm start]
        parts = warm_start.CompiledParts(kind, lowered, core, core_options, planned, hoist)
        result.warm_recipe = warm_start.recipe_for(parts, options)
    # The core keeps `lowered` alive (its run_python_node); the tape is
    # the recipe's now, if anyone's.
    lowered.tape = None
    return result


def _fall_back(
    record: GraphRecord, example_inputs: list[Any], options: Options, error: Exception
) -> Callable[..., Any]:
    """Writes a reproducer (with a dump folder), then raises (strict) or warns."""
    reason = f"{type(error).__name__}: {error}"
    record.fallback_reason = reason
    folder = options.dump_folder()
    repro = ""
    if folder:
        try:
            record.repro_path = write_reproducer(
                folder, record.gm, example_inputs, _repro_options(options),
                name=record.name, kind=record.kind, reason=reason,
            )  # fmt: skip
            repro = f" Reproducer: {record.repro_path}"
        except Exception as repro_error:  # the failure report matters more
            repro = f" (no reproducer: {repro_error})"
    else:
        repro = " Set MYBACKEND_DUMP_DIR to write a reproducer."
    if options.strict:
        if record.repro_path and hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"mybackend reproducer: {record.repro_path}")
        raise error
    warn_once(
        f"compile:{reason}",
        f"mybackend: could not compile {record.name} ({reason}); it runs eagerly. "
        f"Pass options={{'strict': True}} to raise instead.{repro}",
    )
    publish(record)
    _write_debug_outputs(record, options)
    return EagerGraphFunction(record.gm)


def _write_debug_outputs(record: GraphRecord, options: Options) -> None:
    """Dumps and trace artifacts; their failure warns but never fails the compile."""
    try:
        dump_graph(record, options)
        emit_graph_artifacts(record)
    except Exception as error:
        warn_once(
            f"debug-output:{type(error).__name__}",
            f"mybackend: writing dumps/trace artifacts of {record.name} failed "
            f"({type(error).__name__}: {error})",
        )


def static_input_indices(kind: str) -> list[int]:
    """Inputs aot_autograd marks static (parameters, buffers): CUDA graphs
    capture them at their own address instead of copying them per call."""
    if kind == "backward":
        return []
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    return list(getattr(metadata, "static_input_indices", None) or [])


def _repro_options(options: Options) -> dict[str, Any]:
    """The options a reproducer compiles with: the user's, minus where to dump."""
    values = options.user_dict()
    values.pop("dump_dir", None)
    return values
