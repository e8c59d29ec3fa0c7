"""What torch.distributed's compile paths expect of a backend (docs/distributed.md).

Note [DDPOptimizer counts aot_autograd compiles]
Under DistributedDataParallel, dynamo's DDPOptimizer
(torch/_dynamo/backends/distributed.py) splits each dynamo graph at the
gradient buckets' boundaries and calls the backend once per bucket, all
under one TracingContext. Whether a bucket's call went through aot_autograd
it learns from one counter only, ``counters["aot_autograd"]["total"]``,
which torch's own wrapper (``torch._dynamo.backends.common.AotAutograd``,
what Inductor and aot_eager use) increments before it calls
``aot_module_simplified``. mybackend calls ``aot_module_simplified``
itself, so the counter stood still and DDPOptimizer took every bucket for a
non-aot backend: it never recorded the bucket's forward metadata
(``ddp_optimizer_ctx.metadata_per_bucket``, ``curr_bucket`` stayed -1).
aot_autograd compiles a backward lazily, on the first backward call, and
for that it takes the bucket's metadata from that list, last bucket first;
with none recorded, the first backward failed with "expected same # of fw
and bw compiles, but found bucket -1" (issue 33). Counting the compile as
torch's wrapper does makes DDPOptimizer do its bookkeeping for our graphs
as for Inductor's: it records the metadata, and it feeds the next bucket
the fake outputs aot_autograd hands back on the first call
(``fakify_first_call``) instead of running the bucket again under fake
tensors.

The count is made only once ``aot_module_simplified`` has returned: a graph
that aot_autograd could not trace runs as dynamo's graph (the backend's
failure policy) and has no lazy backward, so DDPOptimizer must not record
metadata for it, or the backward buckets would take each other's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx
from torch._dynamo.utils import counters


def count_aot_compile() -> None:
    """Counts one successful call of aot_autograd the way torch's own
    aot_autograd backends do (Note [DDPOptimizer counts aot_autograd
    compiles])."""
    counters["aot_autograd"]["total"] += 1
    counters["aot_autograd"]["ok"] += 1


# Note [Graphs of compiled autograd]
# With torch._dynamo.config.compiled_autograd on (DDP's "python_reducer"
# mode needs it), autograd's backward becomes one dynamo graph, and its first
# input is a list: the boxed tensors the backward reads (saved activations,
# gradients), which the graph takes apart with getitem nodes and whose owner
# empties it so that the tensors die with their last use. aot_autograd
# traces flat inputs only ("all flat_args must be KNOWN_TYPES"). Inductor and
# torch's aot_autograd backends wrap such graphs with torch's
# flatten_graph_inputs, which hands the compiler a GmWrapper instead of a
# GraphModule; our passes read the graph itself, so we flatten the graph
# instead: each list element becomes a placeholder of its own, in place of
# its getitem node, and the callable we return takes the caller's list
# apart. The list is emptied as the graph asks (its placeholder's
# "steal_arg"), but the flat arguments then live until the graph returns:
# a compiled-autograd backward keeps its saved tensors until it ends
# (docs/distributed.md, known limits).


def has_nested_inputs(example_inputs: Sequence[Any]) -> bool:
    """Whether a graph takes a list, tuple or dict (never one dynamo made for
    a frame, whose inputs are flat; compiled autograd's backward does)."""
    return any(isinstance(x, list | tuple | dict) for x in example_inputs)


def flatten_list_input(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[torch.fx.GraphModule, list[Any], bool] | None:
    """The graph with its list input split into placeholders (Note [Graphs of
    compiled autograd]), its flat example inputs, and whether the caller's
    list is to be emptied; None where the graph is not of that form (a list
    first, read by constant-index getitem nodes only, nothing else nested)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if (
        not example_inputs
        or not isinstance(example_inputs[0], list)
        or has_nested_inputs(example_inputs[1:])
        or len(placeholders) != len(example_inputs)
    ):
        return None
    boxed = placeholders[0]
    readers = list(boxed.users)
    if not all(
        r.op == "call_function" and r.target is operator.getitem and isinstance(r.args[1], int)
        for r in readers
    ):
        return None
    graph = torch.fx.Graph()
    values: dict[torch.fx.Node, torch.fx.Node] = {}
    elements = []
    for index in range(len(example_inputs[0])):
        element = graph.placeholder(f"{boxed.name}_{index}")
        element.meta = dict(boxed.meta)  # source and stack trace; the value follows
        element.meta.pop("example_value", None)
        element.meta.pop("val", None)
        elements.append(element)
    for reader in readers:
        element = elements[reader.args[1]]
        element.meta.update(reader.meta)
        values[reader] = element
    graph.graph_copy(gm.graph, values)  # copies every node but the output
    graph.output(torch.fx.map_arg(gm.graph.output_node().args[0], values.__getitem__))
    graph.erase_node(values[boxed])  # the list's copy: its readers are placeholders now
    flat = torch.fx.GraphModule(gm, graph)
    flat.meta.update(gm.meta)
    flat_inputs = [*example_inputs[0], *example_inputs[1:]]
    return flat, flat_inputs, bool(boxed.meta.get("steal_arg", False))


class FlattenedCall:
    """Calls a graph compiled on flattened inputs with the caller's list
    input (Note [Graphs of compiled autograd])."""

    def __init__(self, compiled: Callable[..., Any], empty_list: bool) -> None:
        self._compiled = compiled
        self._empty_list = empty_list

    def __call__(self, boxed: list[Any], *rest: Any) -> Any:
        flat = [*boxed, *rest]
        if self._empty_list:
            boxed.clear()
        return self._compiled(*flat)


# Note [No floor across collectives]
# A graph that calls collectives (compiled autograd's backward under DDP's
# Python reducer holds one all-reduce per gradient) is not timed against
# eager (Note [Eager is the floor]): a call's time there is mostly waiting
# for the slowest rank, and each rank would choose its side on its own
# clock. Ranks that chose differently would then issue the graph's
# collectives from different programs, the ATen graph and the core's
# schedule, whose orders need not agree, and collectives matched out of
# order across ranks hang or mix tensors up.
#
# Nor is any graph timed while this process is one of several ranks
# (multi_rank()): a training step's backward (Note [A training step is timed
# whole]) runs beside DDP's all-reduces and FSDP2's all-gathers, which wait
# for the other ranks. Measured on 2 H200s, GPT-2 under DDP: the two ranks'
# floors chose apart on 5 of 14 bucket graphs, and graphs compiled 1.5x
# faster alone ran eagerly (0.96x eager per step). Until the ranks agree on
# one choice, every rank runs what it compiled.
COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "c10d"})

# Note [Graphs under FSDP2]
# FSDP2 (fully_shard) runs its all-gathers and reduce-scatters in module
# hooks that dynamo does not trace (torch._dynamo.config.skip_fsdp_hooks;
# torch 2.11's FSDP2 also refuses to be traced under compiled autograd:
# detect_compiled_autograd asserts eager mode). Calling a sharded module is
# a graph break, so every graph mybackend gets holds compute only. The
# blocks share one graph. No eager floor times these graphs (multi_rank(),
# Note [No floor across collectives]): a training graph's backward span
# (Note [A training step is timed whole]) would hold FSDP2's unshard of the
# block (the all-gather and the stream's wait for it, that is for the other
# rank), so each rank's choice would rest on the other's pace
# (docs/distributed.md, FSDP2).
#
# FSDP2 frees an unsharded parameter's storage after use (resize to zero)
# and, before the next use, gives the same tensor new storage and writes
# the all-gathered values into it with its version counter preserved
# (torch.autograd._unsafe_preserve_version_counter); the CUDA caching
# allocator often hands back the same block. A cache keyed on a
# parameter's tensor, address and version sees no change, so the option
# hoist_parameter_work (Note [Watching hoisted inputs]) would keep the
# values computed from the weights before an optimizer step, as it does for
# edits through ``p.data``. fsdp2_in_use() tells whether such parameters
# exist in this process; hoisting is ignored, with one warning, while they
# do (mybackend/passes/pipeline.py).


def fsdp2_in_use() -> bool:
    """Whether a module of this process is sharded by FSDP2 (fully_shard)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed._composable_state import _module_state_mapping
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    return any(isinstance(ref(), FSDPState) for ref in list(_module_state_mapping.values()))


def multi_rank() -> bool:
    """Whether this process is one of several ranks of a process group."""
    distributed = torch.distributed
    return (
        distributed.is_available()
        and distributed.is_initialized()
        and distributed.get_world_size() > 1
    )


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls a torch.distributed collective."""
    # A dynamo graph may call an op's packet (``all_reduce``) rather than an
    # overload (``all_reduce.default``); a packet has no ``namespace``, and
    # reading one looks for an overload of that name and raises.
    return any(
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket)
        and _namespace(node.target) in COLLECTIVE_NAMESPACES
        for node in gm.graph.nodes
    )


def _namespace(op: torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return op.namespace
    return op._qualified_op_name.split("::", 1)[0]
