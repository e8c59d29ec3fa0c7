"""Convolutions over non-overlapping patches computed as one matrix product.

Note [Patch convolutions as products]
Vision transformers and their hybrids cut the image into patches with a
convolution whose stride is its kernel (ViT and DeiT 16x16, Swin and
ConvNeXt 4x4, MLP-Mixer, BEiT): each output pixel is the dot product of
one patch with each filter, and no two patches overlap, so the whole
convolution is one product of the patches, laid out as rows, with the
filters: ``[N * Ho * Wo, C * kh * kw] @ [C * kh * kw, O]``. cuDNN runs it
as an implicit GEMM over three input channels: ViT-B/16's 16x16 patch
embedding of one 224x224 image took 56 us on an H200 (cuDNN's
``implicit_convolve_sgemm``, 11% of the model's step under CUDA graphs)
for 0.23 GFLOP, which a product runs in a few microseconds.

So, in inference graphs, this pass rewrites such a convolution (2-D, stride
equal to the kernel, no padding, no dilation, one group, not transposed,
height and width multiples of the kernel, a CUDA float input of at most
MAX_PATCH_CHANNELS channels and a contiguous weight of its dtype, static
shapes) as

    x -> view [N, C, Ho, kh, Wo, kw] -> permute [N, Ho, Wo, C, kh, kw]
      -> clone (contiguous: the patches as rows) -> view [N * Ho * Wo, C * kh * kw]
      -> addmm(bias, patches, weight.view(O, C * kh * kw).t()) (mm without a bias)
      -> view [N, Ho, Wo, O] -> permute [N, O, Ho, Wo]

The patch copy moves rows of kw elements (Note [Lone reordering copies]),
the product takes its bias in cuBLASLt's epilogue, and the result is the
convolution's in channels-last strides, which is what these models read
next: a ViT flattens and transposes it into [N, Ho * Wo, O] (now a view),
Swin and ConvNeXt permute it to [N, Ho, Wo, O] for a LayerNorm over the
channels (a view too). Strides then change downstream: metadata is
propagated again, a contiguous copy goes before a view the new strides
cannot express, ops with a layout contract get their traced layout
(Note [Layout contracts]) and graph outputs get their old strides back,
as the channels-last plan does. A rewrite that cannot be propagated leaves
the graph as it was.

Only images: with a few channels cuDNN's implicit GEMM, which vectorizes
over them, leaves most of its lanes idle. A patch convolution deeper in a
network (ConvNeXt's 2x2 downsampling over 96 to 384 channels) reads
channels-last activations that cuDNN handles well, where the product would
first copy every input element into its patch row; it stays a convolution
(and the group floor times it against ATen's, Note [A group is timed
against its ATen form]).

Training graphs keep their convolutions (the joint graph would need the
product's backward in place of the convolution's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.lowering.graph_modules import new_graph_module
from mybackend.passes.elementwise import has_static_layout
from mybackend.passes.fake_prop import (
    Repropagation,
    call_with_value,
    copy_graph,
    output_values,
    restore_output_strides,
    same_dims,
)
from mybackend.passes.layout import placeholder_values
from mybackend.passes.layout_contracts import settle_strides

aten = torch.ops.aten
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_MAX_ROUNDS = 8
# Note [Patch convolutions as products]: images only.
MAX_PATCH_CHANNELS = 4


def _is_patch_convolution(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default:
        return False
    if len(node.args) != 9 or node.kwargs:
        return False
    x, weight, _bias, stride, padding, dilation, transposed, _out_pad, groups = node.args
    if not isinstance(x, torch.fx.Node) or not isinstance(weight, torch.fx.Node):
        return False
    xv, wv = x.meta.get("val"), weight.meta.get("val")
    if not (has_static_layout(xv) and has_static_layout(wv)) or xv.dim() != 4:
        return False
    if xv.device.type != "cuda" or xv.dtype not in _FLOATS or wv.dtype != xv.dtype:
        return False
    kernel = list(wv.shape[2:])
    if transposed or groups != 1 or list(stride) != kernel or kernel[0] * kernel[1] < 2:
        return False
    if any(p != 0 for p in padding) or any(d != 1 for d in dilation):
        return False
    height, width = xv.shape[2:]
    if xv.shape[1] > MAX_PATCH_CHANNELS:
        return False
    return height % kernel[0] == 0 and width % kernel[1] == 0 and wv.is_contiguous()


def _as_product(graph: torch.fx.Graph, conv: torch.fx.Node) -> None:
    """Replaces ``conv`` by the patch product of the Note."""
    x, weight, bias = conv.args[0], conv.args[1], conv.args[2]
    assert isinstance(x, torch.fx.Node) and isinstance(weight, torch.fx.Node)
    batch, channels, height, width = x.meta["val"].shape
    out_channels, _, kh, kw = weight.meta["val"].shape
    rows, cols = height // kh, width // kw
    with graph.inserting_before(conv):
        source = x
        if not x.meta["val"].is_contiguous():
            source = call_with_value(
                graph, aten.clone.default, (x,), {"memory_format": torch.contiguous_format}
            )
        split = call_with_value(
            graph, aten.view.default, (source, [batch, channels, rows, kh, cols, kw])
        )
        moved = call_with_value(graph, aten.permute.default, (split, [0, 2, 4, 1, 3, 5]))
        patches = call_with_value(
            graph, aten.clone.default, (moved,), {"memory_format": torch.contiguous_format}
        )
        flat = call_with_value(
            graph, aten.view.default, (patches, [batch * rows * cols, channels * kh * kw])
        )
        filters = call_with_value(
            graph, aten.view.default, (weight, [out_channels, channels * kh * kw])
        )
        filters_t = call_with_value(graph, aten.permute.default, (filters, [1, 0]))
        if isinstance(bias, torch.fx.Node):
            product = call_with_value(graph, aten.addmm.default, (bias, flat, filters_t))
        else:
            product = call_with_value(graph, aten.mm.default, (flat, filters_t))
        image = call_with_value(
            graph, aten.view.default, (product, [batch, rows, cols, out_channels])
        )
        result = call_with_value(graph, aten.permute.default, (image, [0, 3, 1, 2]))
    conv.replace_all_uses_with(result)
    graph.erase_node(conv)


def _same_strides(new: Any, old: Any) -> bool:
    if not isinstance(old, torch.Tensor):
        return True
    return isinstance(new, torch.Tensor) and same_dims(new.stride(), old.stride())


def patch_convolutions_as_products(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any] | None = None
) -> tuple[torch.fx.GraphModule, int]:
    """``gm`` with its patch convolutions rewritten (Note [Patch convolutions
    as products]) and how many were; ``gm`` itself when none was."""
    if not any(_is_patch_convolution(n) for n in gm.graph.nodes):
        return gm, 0
    inputs = list(example_inputs) if example_inputs is not None else placeholder_values(gm)
    fake_mode = detect_fake_mode(inputs)
    if fake_mode is None:
        return gm, 0
    original = output_values(gm)
    graph, traced = copy_graph(gm)
    rewritten = new_graph_module(gm, graph)
    propagation = Repropagation(rewritten)
    convs = [n for n in graph.nodes if _is_patch_convolution(n)]
    try:
        with fake_mode:
            for conv in convs:
                _as_product(graph, conv)
        if settle_strides(graph, propagation, inputs, traced, _MAX_ROUNDS) is None:
            return gm, 0
        restore_output_strides(rewritten, original)
    except Exception:  # a rewrite for speed is never a compile failure
        return gm, 0
    if not all(
        _same_strides(a, b) for a, b in zip(output_values(rewritten), original, strict=True)
    ):
        return gm, 0
    return rewritten, len(convs)
