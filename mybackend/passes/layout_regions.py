"""Which convolutions a channels-last plan loses on (Note [Layout regions pay
for their copies]).

Note [Layout regions pay for their copies]
The channels-last plan (Note [Channels-last planning]) pays off when the
layout flows: one copy at the image, then every convolution, batch norm,
activation and pooling in between reads and writes channels-last. It loses
where each convolution sits between ops that need NCHW back: a UNet's
conv -> GroupNorm -> SiLU blocks (CUDA's group norm takes NCHW only, Note
[Layout contracts]) got one copy into channels-last before every
convolution and one back after it, two transposing copies of each
activation per convolution, and ran at 0.59x eager at batch 1 (0.93x under
CUDA graphs; H200, 2026-11-27). cuDNN handed the NCHW tensors does the same
transposition inside its call, with its own kernels.

So the planned graph is cut into regions: the components of its operator
nodes joined by data edges, with the plan's own copies removed. A region's
cost is the bytes of the copies it needs per call: the activation copies
into channels-last that its convolutions read, and the copies back that
its values leave through (a group norm's input, a flatten, a graph
output). Weight copies are not counted: cuDNN transforms an NCHW weight in
every call too. Its gain is bounded by what cuDNN would transpose for it:
its convolutions' inputs and outputs. A region whose copies move at least
half those bytes (the copies are separate kernels, ATen's transposing copy
among them, slower than cuDNN's own) loses, and its convolutions are left
in the traced layout; the plan is redone without them until every region
left pays (or no convolution is left, and the graph keeps its layout).

A ResNet is one region with the image copy in and the flatten out, a few
bytes against every convolution's; a lone convolution between two NCHW-only
ops costs exactly its input and output and is never planned.

Inference graphs only: a training step's joint graph plans every
convolution (option ``channels_last_everywhere`` does so everywhere). Its
regions also hold the backward's convolutions and gradient copies, which
this count does not weigh, and the NCHW backward paths differ: on an H200
(2026-11-27) a lone bf16 convolution + bias + ReLU trained NCHW gave an
input gradient 0.176 from the fp64 one (relative norm) where eager's was
0.056, so left unplanned it would fail the engine sweep's accuracy check.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import torch
import torch.fx

aten = torch.ops.aten


def _bytes(node: torch.fx.Node) -> int | None:
    """The bytes of node's tensor value, or None when unknown (symbolic)."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0
    numel = value.numel()
    return int(numel) * value.element_size() if isinstance(numel, int) else None


class _Components:
    """Union-find over nodes."""

    def __init__(self) -> None:
        self.parent: dict[torch.fx.Node, torch.fx.Node] = {}

    def find(self, node: torch.fx.Node) -> torch.fx.Node:
        root = self.parent.setdefault(node, node)
        while root is not self.parent[root]:
            root = self.parent[root]
        while node is not root:  # path compression
            self.parent[node], node = root, self.parent[node]
        return root

    def join(self, a: torch.fx.Node, b: torch.fx.Node) -> None:
        self.parent[self.find(a)] = self.find(b)


def losing_convolutions(
    graph: torch.fx.Graph, traced: Mapping[torch.fx.Node, object], planned: Collection[str]
) -> set[str]:
    """The names of the planned convolutions (`planned`) whose regions cost
    more than they gain. `traced` holds the nodes the plan did not insert:
    every other node is one of its copies."""
    inserted = {n for n in graph.nodes if n.op == "call_function" and n not in traced}
    regions = _Components()
    for node in graph.nodes:
        if node.op != "call_function" or node in inserted:
            continue
        regions.find(node)
        for user in node.users:
            if user.op == "call_function" and user not in inserted:
                regions.join(node, user)
    cost: dict[torch.fx.Node, int] = {}
    gain: dict[torch.fx.Node, int] = {}
    members: dict[torch.fx.Node, list[str]] = {}
    for node in graph.nodes:
        if node.target is not aten.convolution.default or node.name not in planned:
            continue
        source = node.args[0]
        sizes = (_bytes(source), _bytes(node)) if isinstance(source, torch.fx.Node) else (None,)
        if any(size is None for size in sizes):
            return set()  # symbolic sizes: no estimate, the plan stands
        region = regions.find(node)
        gain[region] = gain.get(region, 0) + sum(s for s in sizes if s is not None)
        members.setdefault(region, []).append(node.name)
    for copy in inserted:
        size = _bytes(copy)
        if size is None:
            return set()
        if copy.kwargs.get("memory_format") == torch.channels_last:
            # Into the layout: counted for the convolutions reading it as
            # their input (not as their weight).
            for user in copy.users:
                if user.target is aten.convolution.default and user.args[0] is copy:
                    region = regions.find(user)
                    cost[region] = cost.get(region, 0) + size
                    break
            continue
        source = copy.args[0]
        if isinstance(source, torch.fx.Node) and source in regions.parent:
            region = regions.find(source)
            cost[region] = cost.get(region, 0) + size
    losing: set[str] = set()
    for region, names in members.items():
        if 2 * cost.get(region, 0) >= gain[region]:
            losing.update(names)
    return losing
