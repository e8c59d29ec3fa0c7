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
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

from mybackend import _C
from mybackend._logging import get_logger, warn_once
from mybackend.aot_logs import skipping_unread_graph_texts
from mybackend.attention_masks import SDPA_TARGETS, rewrite_attention_masks
from mybackend.common_subexpressions import eliminate_common_subexpressions
from mybackend.compile_times import PARTITION, timed, timed_graph_compile
from mybackend.compiled import CompiledGraphFunction, EagerGraphFunction
from mybackend.cross_entropy import rewrite_cross_entropy
from mybackend.debug.dumps import dump_graph
from mybackend.debug.repro import write_reproducer
from mybackend.debug.tracing import emit_graph_artifacts
from mybackend.decompositions import decomposition_table
from mybackend.gc_pause import collections_paused
from mybackend.lowering import lower
from mybackend.lowering.batch_norm_gradients import copy_batch_norm_gradients
from mybackend.lowering.fake_prop import copy_graph
from mybackend.lowering.graph_modules import new_graph_module
from mybackend.lowering.hoist import HoistedGraphFunction, HoistedValues, hoist_parameter_work
from mybackend.lowering.layout import placeholder_values, plan_channels_last
from mybackend.lowering.matmul_padding import pad_matmuls
from mybackend.lowering.mutations import batch_input_mutations
from mybackend.lowering.permuted_cats import write_permuted_cats
from mybackend.lowering.scatter_adds import fold_scatter_adds
from mybackend.lowering.widening_casts import cast_after_views, split_widening_casts
from mybackend.options import Options
from mybackend.reports import GraphRecord, publish

log = get_logger("aot")
_graph_ids = itertools.count()


def compile_with_aot(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options
) -> Callable[..., Any]:
    """Runs aot_autograd on a dynamo graph with our compiler for every part."""
    graph_id = next(_graph_ids)
    # Note [Recovery runs the user's program]: the caller's graph stays as
    # dynamo made it; the torch-level rewrites below work on a copy.
    if _rewrites_torch_calls(gm, options):
        copied, _ = copy_graph(gm)
        gm = new_graph_module(gm, copied)
    if rewrite_attention_masks(gm):
        log.debug("graph%d: attention masks rewritten for fused kernels", graph_id)
    if options.fused_cross_entropy and (fused := rewrite_cross_entropy(gm)):
        log.debug("graph%d: %d cross-entropy calls fused", graph_id, fused)

    def compiler(kind: str) -> Callable[..., Any]:
        return functools.partial(
            compile_aten_graph, name=f"graph{graph_id}.{kind}", kind=kind, options=options
        )

    with skipping_unread_graph_texts():  # Note [Unread graph texts]
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            inference_compiler=compiler("inference"),
            decompositions=decomposition_table(example_inputs, gm),
            partition_fn=functools.partial(_partition, options=options),
            keep_inference_input_mutations=True,
        )


def _rewrites_torch_calls(gm: torch.fx.GraphModule, options: Options) -> bool:
    """Whether the dynamo graph calls what the rewrites before aot_autograd
    may change (a scan of targets, far cheaper than a copy of the graph)."""
    targets = set(SDPA_TARGETS)
    if options.fused_cross_entropy:
        targets.add(torch.nn.functional.cross_entropy)
    return any(node.op == "call_function" and node.target in targets for node in gm.graph.nodes)


def _partition(
    joint: torch.fx.GraphModule, joint_inputs: Any, *, options: Options, **kwargs: Any
) -> Any:
    """The min-cut partitioner, after the joint graph's channels-last plan and
    matrix-product padding (planned before the split, forward and backward
    agree on the strides of every saved tensor: Note [Channels-last
    planning], Note [Aligned matrix products]). Timed: aot_autograd has no
    timer of its own for it, and it is a large part of compiling a training
    graph."""
    # Note [One recompile per joint graph]
    # Each pass below returns a new GraphModule and recompiled it at its
    # end, before the min-cut partitioner's own first step, a recompile:
    # with plain modules, four code generations of ResNet-50's 3000-node
    # joint graph (0.75 s on the development machine). Nothing runs the
    # joint module in between (propagation walks its nodes), so the passes
    # leave the final recompile to the partitioner. Under dynamo the modules
    # are lazy (Note [Graph modules made lazily]) and a recompile is only a
    # flag; the passes skip theirs all the same, for the callers outside
    # dynamo whose modules are plain.
    with timed(PARTITION):
        if options.channels_last:
            joint, conversions = plan_channels_last(
                joint, placeholder_values(joint), recompile=False
            )
            if conversions:
                log.debug("joint graph: %d channels-last conversions planned", conversions)
        if options.pad_matmuls:
            joint, padded = pad_matmuls(joint, placeholder_values(joint), "joint", recompile=False)
            if padded:
                log.debug("joint graph: %d matrix products padded", padded)
        return min_cut_partition(joint, joint_inputs, **kwargs)


def min_cut_partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
    """torch's min-cut partitioner after our common-subexpression pass, with
    its own off (Note [Our own common-subexpression pass])."""
    try:
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
    static_inputs = static_input_indices(kind)
    inputs = list(example_inputs)

    def compile_now() -> Callable[..., Any]:
        with timed_graph_compile(kind):
            return _compile_now(gm, inputs, name, kind, options, static_inputs)

    if options.background_compile:
        from mybackend.debug.background import BackgroundGraphFunction

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
    stage_times: list[tuple[str, float]] = []
    ir_text = ""
    planned = gm
    try:
        start = time.perf_counter()
        if batched := batch_input_mutations(planned):
            log.debug("%s: %d input mutations batched", name, batched)
        if options.pad_matmuls:
            planned, padded = pad_matmuls(planned, example_inputs, kind)
            if padded:
                stage_times.append(("padding", time.perf_counter() - start))
                log.debug("%s: %d matrix products padded", name, padded)
                start = time.perf_counter()
        if kind == "inference" and options.channels_last:
            planned, conversions = plan_channels_last(planned, example_inputs)
            if conversions:  # else its (small) time counts as lowering
                stage_times.append(("layout", time.perf_counter() - start))
                log.debug("%s: %d channels-last conversions planned", name, conversions)
                start = time.perf_counter()
        hoist = None
        if kind == "inference" and options.hoist_parameter_work:
            hoist = hoist_parameter_work(planned, example_inputs, static_inputs)
        if hoist is not None:
            planned, example_inputs = hoist.main, hoist.example_inputs
            static_inputs = [*static_inputs, *hoist.hoisted_inputs]
            stage_times.append(("hoisting", time.perf_counter() - start))
            start = time.perf_counter()
        # All rewrite in place; one code generation serves them (the eager
        # fallback may run `planned` when it is `gm` itself).
        copied = moved = split = 0
        if options.generated_kernels:
            copied = copy_batch_norm_gradients(planned, recompile=False)
            moved = cast_after_views(planned, recompile=False)
            split = split_widening_casts(planned, recompile=False)
        folded = fold_scatter_adds(planned, recompile=False)
        cats = write_permuted_cats(planned, recompile=False)
        if copied or moved or split or folded or cats:
            planned.recompile()
            log.debug(
                "%s: %d batch-norm gradients copied for their sums, %d widening casts moved "
                "after their views, %d copied per reader, %d scatter sums folded, %d permuted "
                "copies written by their concatenation",
                name,
                copied,
                moved,
                split,
                folded,
                cats,
            )
        lowered = lower(planned, example_inputs)
        stage_times.append(("lowering", time.perf_counter() - start))
        ir_text = lowered.graph.to_text(True)
        core = _C.compile(
            lowered.graph, options.core_options(static_inputs), lowered.run_python_node
        )
    except Exception as error:
        record = GraphRecord(name, kind, ir_text, None, stage_times, gm=gm)
        return _fall_back(record, example_inputs, options, error)
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
    if hoist is not None:
        return HoistedGraphFunction(compiled, HoistedValues(hoist))
    return compiled


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
