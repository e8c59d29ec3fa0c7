"""The graph-pass driver: runs one ordered list of passes over one FX graph.

Note [Passes as data]
mybackend's FX rewrites run at three points (mybackend/passes/pipeline.py):
on dynamo's graph before aot_autograd traces it, on the joint graph before
the min-cut partitioner splits it, and on each forward, backward or
inference graph before lowering. Each point is an ordered list of
``GraphPass`` entries (a name, whether the options enable it, the graph
kinds and call targets it applies to, and the function that runs it), and
``run_passes`` is the one place that runs them, as src_cpp/pipeline/
pipeline.cpp runs the C++ stages: it skips what is disabled (by its own
option, or by name with the option ``disabled_passes`` or the variable
MYBACKEND_DISABLED_PASSES) or cannot apply,
times each pass, logs what each changed, writes the graph after each
pass that changed it into the dump folder, names the pass that raised, and
marks the module's code stale once at the end, not once per pass (the joint
graph skips even that: Note [One recompile per joint graph] in aot.py); the
code is generated when first needed (Note [Backward graphs recompiled
lazily] in mybackend/lowering/graph_modules.py).
A pass rewrites ``PassContext.gm`` in place or replaces it with a new
module, and returns how many changes it made (0: none).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx

from mybackend._logging import get_logger
from mybackend.hooks.dumps import dump_pass
from mybackend.lowering.graph_modules import recompile_lazily
from mybackend.options import Options, disabled_pass_names
from mybackend.passes.hoist import HoistPlan
from mybackend.passes.layout import placeholder_values

log = get_logger("aot")  # where the passes logged before they were data

# The graph kinds of PassContext.kind: dynamo's graph, aot_autograd's joint
# graph, and the graphs the C++ core compiles.
DYNAMO, JOINT = "dynamo", "joint"
COMPILED_KINDS = frozenset({"inference", "forward", "backward"})


@dataclasses.dataclass
class PassContext:
    """One graph on its way through a pass list, and what passes change beside it."""

    gm: torch.fx.GraphModule
    # Its example inputs; None for a joint graph, whose inputs are its
    # placeholders' values (see inputs()).
    example_inputs: list[Any] | None
    kind: str  # DYNAMO, JOINT, or one of COMPILED_KINDS
    name: str  # for logs and dumps: "graph0", "graph0.joint", "graph0.forward"
    options: Options
    static_inputs: list[int] = dataclasses.field(default_factory=list)
    hoist: HoistPlan | None = None  # set by the hoisting pass
    # (pass, seconds, changes) of every pass that ran, in order.
    times: list[tuple[str, float, int]] = dataclasses.field(default_factory=list)

    def inputs(self) -> list[Any]:
        """The graph's example inputs (a joint graph's: its placeholders' values)."""
        if self.example_inputs is None:
            return placeholder_values(self.gm)
        return self.example_inputs

    def stage_times(self) -> list[tuple[str, float]]:
        """(pass, seconds) of the passes that changed the graph: explain()'s
        compile-time stages (the others' time counts toward the next stage)."""
        return [(name, seconds) for name, seconds, changes in self.times if changes]


@dataclasses.dataclass(frozen=True)
class GraphPass:
    """One entry of a pass list (Note [Passes as data])."""

    name: str  # in logs, dumps, errors and explain()'s compile-time stages
    enabled: Callable[[Options], bool]
    run: Callable[[PassContext], int]  # rewrites the context's graph; returns the changes
    kinds: frozenset[str] | None = None  # the graph kinds it runs on; None: all of its list's
    # The call targets it rewrites; a graph that calls none of them is
    # skipped without a walk of the pass's own. Empty: any graph.
    targets: tuple[Any, ...] = ()


class PassError(RuntimeError):
    """A graph pass raised; says which, on which graph (the cause is chained)."""

    def __init__(self, pass_name: str, graph: str, error: Exception) -> None:
        super().__init__(
            f"graph pass {pass_name!r} failed on {graph}: {type(error).__name__}: {error}"
        )
        self.pass_name = pass_name
        self.graph = graph


def always(options: Options) -> bool:
    """``enabled`` of a pass no option switches off."""
    return True


def selected(passes: Sequence[GraphPass], ctx: PassContext) -> list[GraphPass]:
    """The passes of a list that apply to ``ctx``'s graph: enabled by its
    options (and not in ``disabled_passes``), for its kind, and calling one
    of their targets."""
    called: set[Any] | None = None
    chosen = []
    disabled = disabled_pass_names(ctx.options)
    for graph_pass in passes:
        if not graph_pass.enabled(ctx.options) or graph_pass.name in disabled:
            continue
        if graph_pass.kinds is not None and ctx.kind not in graph_pass.kinds:
            continue
        if graph_pass.targets:
            if called is None:
                called = {n.target for n in ctx.gm.graph.nodes if n.op == "call_function"}
            if called.isdisjoint(graph_pass.targets):
                continue
        chosen.append(graph_pass)
    return chosen


def run_passes(
    passes: Sequence[GraphPass], ctx: PassContext, *, recompile: bool = True
) -> PassContext:
    """Runs the ``passes`` that apply to ``ctx``'s graph, in order (Note
    [Passes as data]); with ``recompile``, marks the final module's code
    stale once if any pass changed it (generated when first needed). Raises
    PassError naming a pass that raised."""
    folder = ctx.options.dump_folder()
    changed_any = False
    chosen = {id(graph_pass) for graph_pass in selected(passes, ctx)}
    for index, graph_pass in enumerate(passes):  # the index names the pass's place in its list
        if id(graph_pass) not in chosen:
            continue
        start = time.perf_counter()
        try:
            changes = graph_pass.run(ctx)
        except Exception as error:
            raise PassError(graph_pass.name, ctx.name, error) from error
        seconds = time.perf_counter() - start
        ctx.times.append((graph_pass.name, seconds, changes))
        if not changes:
            continue
        changed_any = True
        log.debug("%s: %s made %d changes (%.2f ms)", ctx.name, graph_pass.name, changes,
                  seconds * 1e3)  # fmt: skip
        if folder:
            dump_pass(folder, ctx.name, index, graph_pass.name, ctx.gm)
    if changed_any and recompile:
        recompile_lazily(ctx.gm)  # Note [Backward graphs recompiled lazily]
    return ctx
