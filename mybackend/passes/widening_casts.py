"""Widening casts read by several elementwise nodes: one cast per reader.

Note [One widening cast per reader]
Under autocast a bf16 gradient is often read in f32 by more than one
elementwise consumer. At a ResNet bottleneck's downsample junction the
gradient at the block's input feeds two batch-norm backwards (the main
branch's and the downsample's); each input-gradient kernel reads it through
``_to_copy(grad, dtype=float32)``, and common-subexpression elimination
makes the two casts one node with two readers. The fusion planner then
cannot move the cast into its readers' kernel (Note [Widening casts ride
with their readers] in src_cpp/fusion/pointwise_planner.h: the readers sit
in two groups), so the cast is stored as an f32 tensor: 4 bytes written and
read twice per element, where reading the bf16 value twice costs 4 bytes.
For ResNet-50 at batch 64 the four junctions hold 96 M elements: about
770 MB per step.

This pass, run on a CUDA graph just before lowering when generated kernels
are on, gives each elementwise reader after the first its own copy of such
a cast, so that every cast has one reader and rides into that reader's
kernel. What is split: an ``aten._to_copy`` whose only keyword is the dtype,
or a ``prims.convert_element_type``, from a floating dtype to a floating
dtype at least as wide, on a CUDA device, that is not a graph output and
whose readers are all ATen pointwise operators (``torch.Tag.pointwise``)
with a result of the cast's shape, at least two of them. A reader that is
not pointwise (an ATen call, a library group) would read a cast of its own
as a separate kernel, and the planner moves a cast only into a kernel of
its own shape (a copy left behind is stored wide, once per copy), so such
casts are left as they are. The copies compute the same values: the
graph's results do not change, and its eager run (fallback, accuracy
check) is the same function.

Note [Widening casts after views]
Autocast's backward often upcasts a 16-bit product and then views it:
GPT-2's MLP gradient is ``mm`` (bf16 [4096, 3072]), ``_to_copy`` (f32),
``view`` ([16, 256, 3072]), then the GELU backward's elementwise ops. The
planner moves a cast only into a kernel of its own shape, so behind the
view it cannot ride into the GELU backward's kernel; the matrix-product
planner then writes the product in f32 (Note [Products written in f32]):
50 MB written and read where the bf16 product is 25 MB, about 15 us a
layer on an H100. ``cast_after_views`` swaps the two, ``view`` of the
bf16 product then the cast, when the cast's one reader is a shape view
whose readers are all pointwise operators of the view's shape and the
cast's input is contiguous (so it takes the view as the cast's contiguous
copy did). The values are the same; the cast then joins its readers'
kernel, which reads the product in bf16.
"""

from __future__ import annotations

import torch
import torch.fx

from mybackend.passes.elementwise import SHAPE_VIEWS, is_dtype_cast, is_pointwise

aten = torch.ops.aten


def split_widening_casts(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place; returns how many cast copies were added.
    With ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    added = 0
    for node in list(graph.nodes):
        readers = list(node.users)
        if len(readers) < 2 or not _widening_cuda_cast(node):
            continue
        shape = node.meta["val"].shape
        if not all(is_pointwise(reader) and _same_shape(reader, shape) for reader in readers):
            continue
        for reader in readers[1:]:
            with graph.inserting_after(node):
                copy = graph.call_function(node.target, node.args, dict(node.kwargs))
            copy.meta = dict(node.meta)
            reader.replace_input_with(node, copy)
            added += 1
    if added and recompile:
        gm.recompile()
    return added


def _widening_cuda_cast(node: torch.fx.Node) -> bool:
    if not is_dtype_cast(node):
        return False
    source = node.args[0]
    if not isinstance(source, torch.fx.Node):
        return False
    before, after = source.meta.get("val"), node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    if after.device.type != "cuda" or before.device != after.device:
        return False
    if not (before.dtype.is_floating_point and after.dtype.is_floating_point):
        return False
    return after.dtype != before.dtype and after.dtype.itemsize >= before.dtype.itemsize


def _same_shape(node: torch.fx.Node, shape: torch.Size) -> bool:
    # The planner moves a cast only into a group of its own shape; a copy
    # that stayed behind would be stored wide once per copy.
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.shape == shape


def cast_after_views(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Note [Widening casts after views]: rewrites ``gm`` in place; returns
    how many casts were moved. With ``recompile=False`` the caller
    regenerates ``gm``'s code."""
    graph = gm.graph
    moved = 0
    for cast in list(graph.nodes):
        if len(cast.users) != 1 or not _widening_cuda_cast(cast):
            continue
        [view] = cast.users
        source = cast.args[0]
        if view.target not in SHAPE_VIEWS or view.args[0] is not cast or view.kwargs:
            continue
        if not source.meta["val"].is_contiguous():
            continue  # the cast's copy made it viewable; the source may not be
        readers = list(view.users)
        shape = view.meta["val"].shape
        if not readers or not all(is_pointwise(r) and _same_shape(r, shape) for r in readers):
            continue
        with graph.inserting_before(view):
            narrow_view = graph.call_function(view.target, (source, *view.args[1:]))
            wide = graph.call_function(cast.target, (narrow_view,), dict(cast.kwargs))
        narrow_view.meta = dict(view.meta)
        narrow_view.meta["val"] = source.meta["val"].view(shape)
        wide.meta = dict(view.meta)
        view.replace_all_uses_with(wide)
        graph.erase_node(view)
        graph.erase_node(cast)
        moved += 1
    if moved and recompile:
        gm.recompile()
    return moved
