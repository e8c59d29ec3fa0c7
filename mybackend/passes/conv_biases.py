"""Grouped convolutions hand their bias to the kernels that read them.

Note [Grouped convolution biases]
A depthwise or grouped convolution with a bias reaches cuDNN as one graph,
convolution then bias, and only cuDNN's runtime-fusion engines run such a
graph: a depthwise 7x7 with its bias took 1.2 ms (conv2d_grouped_direct_kernel)
where the convolution alone, in the engine ATen's call picks, took 97 us
(ConvNeXt-T's first stage at batch 32, H200, 2026-11-27). The group floor
(Note [A group is timed against its ATen form]) then hands the group to
ATen, whose convolution adds the bias in a kernel of its own: TensorIterator's
non-vectorized offset loop over a channels-last tensor, 2.5 us a call at
batch 1 (18 calls a step in ConvNeXt-T, 46 us of its 0.59 ms).

So this pass writes such a convolution as the convolution without its bias
and an ``add`` of the bias viewed as [C, 1, ..., 1]:

    convolution(x, w, b, ...)  ->  add(convolution(x, w, None, ...), b.view(C, 1, 1))

cuDNN then runs the convolution alone (the conv planner takes no epilogue
into a grouped convolution's cuDNN graph: bias, batch norm, residual and
ReLU after one stay elementwise ops, Note [Conv groups]), and the add is an
elementwise op like any other: it joins the elementwise ops after the
convolution (a batch norm, an activation) in one generated kernel, or,
alone, is a generated kernel of its own that reads the bias as a periodic
operand (Note [Lone broadcasting ops]): ConvNeXt's, whose reader is a
LayerNorm over channels through a permute, which norm prologues do not
take (Note [Norm prologues]). Only grouped convolutions
(groups > 1, not transposed) on CUDA; dense convolutions keep their fused
epilogues, which no measurement so far shows losing (and the group floor
still times each against ATen). The add's strides must equal the
convolution's (TensorIterator keeps the layout of its first operand);
otherwise the convolution is left as it was.
"""

from __future__ import annotations

import torch
import torch.fx

from mybackend.passes.fake_prop import call_with_value, same_dims

aten = torch.ops.aten


def _peelable(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default:
        return False
    if len(node.args) != 9:  # aot's normalized form
        return False
    x, _, bias, _, _, _, transposed, _, groups = node.args
    value = node.meta.get("val")
    return (
        isinstance(bias, torch.fx.Node)
        and isinstance(x, torch.fx.Node)
        and transposed is False
        and isinstance(groups, int)
        and groups > 1
        and isinstance(value, torch.Tensor)
        and value.device.type == "cuda"
        and isinstance(bias.meta.get("val"), torch.Tensor)
        and bias.meta["val"].dim() == 1
    )


def _peel(graph: torch.fx.Graph, conv: torch.fx.Node) -> bool:
    """Rewrites ``conv`` as the Note says; False (graph unchanged) when the
    add would not keep the convolution's strides."""
    value = conv.meta["val"]
    bias = conv.args[2]
    assert isinstance(bias, torch.fx.Node)
    spatial = value.dim() - 2
    with graph.inserting_before(conv):
        bare = graph.call_function(aten.convolution.default, (*conv.args[:2], None, *conv.args[3:]))
        bare.meta = dict(conv.meta)  # a bias changes no size or stride
        per_channel = call_with_value(
            graph, aten.view.default, (bias, [value.shape[1], *([1] * spatial)])
        )
        total = call_with_value(graph, aten.add.Tensor, (bare, per_channel))
    if not same_dims(total.meta["val"].stride(), value.stride()):
        for node in (total, per_channel, bare):
            graph.erase_node(node)
        return False
    conv.replace_all_uses_with(total)
    graph.erase_node(conv)
    return True


def peel_grouped_conv_biases(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites each grouped convolution with a bias (Note [Grouped
    convolution biases]); returns how many were."""
    peeled = sum(_peel(gm.graph, n) for n in list(gm.graph.nodes) if _peelable(n))
    if peeled and recompile:
        gm.recompile()
    return peeled
