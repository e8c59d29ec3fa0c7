"""Channels-last planning: one layout decision per graph, before lowering.

Note [Channels-last planning]
cuDNN's fastest convolution kernels on tensor-core GPUs read and write NHWC.
Eager (and a graph traced from an NCHW model) hands them NCHW tensors, which
cuDNN transposes inside every call. This pass decides the layout once per
graph instead: each 4-D, non-transposed ``aten.convolution`` reads its input
and weight in channels-last, converted by one ``aten.clone`` per source value
(a value feeding several convolutions is converted once, and a value already
channels-last is left alone). Convolution outputs are then channels-last, and
every op after them follows: elementwise ops, batch norm and pooling keep
the layout of their input, so the convolution chains of a CNN run with no
further conversion. FakeTensor propagation recomputes every node's strides,
so the IR, the fusion planner and the generated kernels see the new layout.

Three places need the old layout back, and get one ``aten.clone``: a
``view`` that is not expressible on channels-last strides (a flatten of the
spatial dims, as in a ViT patch embedding), an op whose kernel does not take
the new strides (CUDA's group norm: Note [Layout contracts] in
layout_contracts.py) and a graph output whose strides changed (callers see
eager's strides). If propagation fails for any other reason, the graph keeps
its original layout.

Conversion runs in rounds: graph inputs first, then every convolution
operand still NCHW after propagation. Under autocast no convolution reads a
graph input directly (each reads a bf16 cast), so the second round converts
the casts and the activations between convolutions together; propagation
then makes the activations channels-last on its own, and their copies,
which would only rewrite an activation in the layout it has, are dropped.
In a joint graph each ``convolution_backward`` reads the same channels-last
copies of its input and weight as the forward convolution (saved or
recomputed by the partitioner), not the NCHW originals: the library call
would otherwise convert them on every step.

Only CUDA convolutions are planned: cuDNN's NHWC kernels are the reason for
the plan, and on the CPU, where mybackend runs ATen's kernels, oneDNN's
channels-last convolutions round differently from eager's NCHW ones for no
gain (a ResNet-18 drifted 3.3e-3 from eager's parameters in 3 SGD steps;
bit-identical without the plan). Tests plan CPU graphs through
``device_types``.

Inference graphs are planned as they reach the compiler. Training graphs
are planned before aot_autograd splits them, on the joint forward-backward
graph (aot.py's partition function): a saved tensor is one node of that
graph, so the forward that writes it and the backward that reads it agree
on its strides, and the backward's convolution, batch-norm and pooling
gradients follow the forward's layout. Planning the forward and backward
graphs one by one could not do that: each carries the strides the other was
traced with. The joint graph's outputs (forward outputs, updated buffers,
gradients) keep their traced strides like any graph's outputs, so a
convolution weight's gradient is copied back to the weight's layout.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.lowering.graph_modules import new_graph_module
from mybackend.passes.fake_prop import (
    Repropagation,
    copy_graph,
    insert_clone,
    output_values,
    restore_output_strides,
)
from mybackend.passes.layout_contracts import settle_strides
from mybackend.passes.layout_regions import losing_convolutions

aten = torch.ops.aten
_CHANNELS_LAST = torch.channels_last
_MAX_ROUNDS = 64


def _is_channels_last(value: Any) -> bool:
    """Channels-last in memory. A tensor with 1x1 spatial sizes, such as a
    1x1 convolution's weight [K, C, 1, 1], lists its elements in the same
    order in both layouts whatever the strides of its size-1 dims say, so it
    needs no copy (Note [Size-one strides] in src_cpp/runtime/libraries/conv_group.cpp:
    the convolution describes it to cuDNN with the strides of the layout it
    runs in)."""
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 4
        and value.is_contiguous(memory_format=_CHANNELS_LAST)
    )


def _planned_convolutions(
    graph: torch.fx.Graph, device_types: Sequence[str], excluded: Collection[str] = ()
) -> list[torch.fx.Node]:
    convs = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not aten.convolution.default:
            continue
        if node.name in excluded:  # Note [Layout regions pay for their copies]
            continue
        x = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        transposed = node.args[6]
        planned = isinstance(x, torch.Tensor) and x.device.type in device_types
        if planned and x.dim() == 4 and not transposed:
            convs.append(node)
    return convs


def _convert_convolution_operands(
    graph: torch.fx.Graph,
    convs: list[torch.fx.Node],
    placeholders_only: bool,
    converted: dict[torch.fx.Node, torch.fx.Node],
) -> int:
    """Points conv inputs and weights that are not channels-last (by their
    current meta) at a channels-last copy, recorded in ``converted`` (source
    to copy, across rounds); returns the copies made. A joint graph's
    convolution backward reads the same copies (Note [Channels-last
    planning])."""
    made = 0
    first_op = next(n for n in graph.nodes if n.op != "placeholder")
    for conv in convs:
        for index in (0, 1):
            source = conv.args[index]
            assert isinstance(source, torch.fx.Node)
            if placeholders_only and source.op != "placeholder":
                continue
            if _is_channels_last(source.meta.get("val")):
                continue
            if source not in converted:
                # Right after the source, so every later conv can share it.
                anchor = first_op if source.op == "placeholder" else source.next
                converted[source] = insert_clone(graph, source, anchor, _CHANNELS_LAST)
                made += 1
            conv.replace_input_with(source, converted[source])
    for node in graph.find_nodes(op="call_function", target=aten.convolution_backward.default):
        for index in (1, 2):  # the forward's input and weight
            source = node.args[index]
            if isinstance(source, torch.fx.Node) and source in converted:
                node.replace_input_with(source, converted[source])
    return made


def _drop_redundant_copies(
    graph: torch.fx.Graph, converted: dict[torch.fx.Node, torch.fx.Node]
) -> int:
    """Removes the channels-last copies whose source ended up channels-last
    itself; returns how many.

    A later round converts every convolution operand that is NCHW at that
    point, in one go: under autocast that includes the ReLU outputs between
    convolutions, which are NCHW only until the first convolution's output
    turns channels-last and propagation carries the layout down the chain.
    Those copies would copy an activation into the layout it already has
    (one extra write per convolution input, and a second saved tensor in
    training).
    """
    dropped = 0
    for clone in converted.values():
        source = clone.args[0]
        assert isinstance(source, torch.fx.Node)
        before, after = source.meta.get("val"), clone.meta.get("val")
        if source.op == "placeholder" or not isinstance(before, torch.Tensor):
            continue
        if not isinstance(after, torch.Tensor) or before.dtype != after.dtype:
            continue
        if tuple(before.stride()) != tuple(after.stride()) or not _is_channels_last(before):
            continue
        clone.replace_all_uses_with(source)
        graph.erase_node(clone)
        dropped += 1
    return dropped


def placeholder_values(gm: torch.fx.GraphModule) -> list[Any]:
    """The FakeTensors (or symbolic sizes) a traced graph's inputs carry."""
    return [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]


def plan_channels_last(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    device_types: Sequence[str] = ("cuda",),
    *,
    recompile: bool = True,
    every_region: bool = False,
) -> tuple[torch.fx.GraphModule, int]:
    """A copy of ``gm`` with the convolutions on ``device_types`` in
    channels-last, and the number of conversions it inserted; ``gm`` itself
    (and 0) when there is nothing to plan or planning fails (Note
    [Channels-last planning]). Convolutions whose regions cost more copies
    than they gain keep the traced layout (Note [Layout regions pay for
    their copies]) unless ``every_region``. With ``recompile=False`` the copy's generated code is
    left stale for a caller that recompiles before anything runs it (Note
    [One recompile per joint graph] in aot.py)."""
    if detect_fake_mode(example_inputs) is None:
        return gm, 0
    excluded: set[str] = set()
    while True:
        plan = _plan_once(gm, example_inputs, device_types, excluded)
        if plan is None:
            return gm, 0
        planned, copies, traced = plan
        convs = {c.name for c in _planned_convolutions(planned.graph, device_types, excluded)}
        losing = set() if every_region else losing_convolutions(planned.graph, traced, convs)
        if not losing:
            break
        excluded |= losing
    if recompile:
        planned.recompile()
    return planned, copies


def _plan_once(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    device_types: Sequence[str],
    excluded: Collection[str],
) -> tuple[torch.fx.GraphModule, int, dict[torch.fx.Node, Any]] | None:
    """The planned copy of ``gm`` with its convolutions but ``excluded`` in
    channels-last, its copies, and the traced value of each node it did not
    insert; None when nothing is planned or planning fails."""
    if not _planned_convolutions(gm.graph, device_types, excluded):
        return None
    original = output_values(gm)

    graph, traced = copy_graph(gm)
    planned = new_graph_module(gm, graph)
    propagation = Repropagation(planned)
    # Round 1 converts graph inputs (activations and weights); everything
    # computed from them takes its layout from propagation. Later rounds
    # convert what propagation left in NCHW (after a layout-changing op), and
    # put a contiguous copy before views that need one.
    converted: dict[torch.fx.Node, torch.fx.Node] = {}
    try:
        copies = _convert_convolution_operands(
            graph, _planned_convolutions(graph, device_types, excluded), True, converted
        )
        settled = settle_strides(
            graph,
            propagation,
            example_inputs,
            traced,
            _MAX_ROUNDS,
            lambda: _convert_convolution_operands(
                graph, _planned_convolutions(graph, device_types, excluded), False, converted
            ),
        )
        if settled is None:
            return None
        copies += settled
        copies -= _drop_redundant_copies(graph, converted)
        if copies == 0:
            return None
        copies += restore_output_strides(planned, original)
    except Exception:  # a layout plan is an optimisation: never a compile failure
        return None
    return planned, copies, traced
