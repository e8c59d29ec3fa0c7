"""A product's transposed operand copied in the layout the product reads.

Note [Transposed operands copied untransposed]
Attention written with matmuls (Swin, T5, DeBERTa, any model not calling
SDPA) computes ``q @ k.transpose(-2, -1)`` on heads split out of one
projection. The batched product needs its operand's batch dims merged
(``[B, H, D, N] -> [B * H, D, N]``), which the split heads' strides do not
allow, so aot_autograd's graph copies ``k^T`` contiguous first:

    k [B, H, N, D] (a view of the projection, D innermost)
      -> transpose -> clone (contiguous [B, H, D, N]) -> view [B * H, D, N] -> bmm

That copy transposes: the input's innermost dim is N, strided by the
projection's row, so every element moves on its own (ATen's offset loop;
Swin-T at batch 32: 26 such copies, 0.23 ms of a 3.8 ms step on an H200).
The product does not need ``k^T`` contiguous: cuBLASLt reads a
column-major operand as it is (operation T). So this pass copies ``k``
contiguous instead, ``[B, H, N, D]`` with D innermost on both sides (a copy
of 16-byte vectors, Note [Lone reordering copies]), and hands the product
its transpose, a view whose batch dims still merge:

    k -> clone (contiguous [B, H, N, D]) -> transpose -> view [B * H, D, N] -> bmm

What is matched: a ``clone`` of a static-shaped CUDA tensor whose last dim
is strided and whose second-to-last has stride 1, that the graph does not
return, read only by a ``bmm``/``mm`` or by one shape view that keeps the
last two dims and is read only by such a product. The view's metadata is
recomputed; where the new strides do not allow it the node stays as it is.
"""

from __future__ import annotations

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.passes.elementwise import SHAPE_VIEWS, has_static_layout
from mybackend.passes.fake_prop import call_with_value
from mybackend.passes.hoist import returned_nodes

aten = torch.ops.aten
_PRODUCTS = (aten.bmm.default, aten.mm.default)


def _transposing_copy(clone: torch.fx.Node) -> bool:
    """A contiguous copy of a CUDA tensor whose last two dims are transposed in memory."""
    source = clone.args[0]
    if not isinstance(source, torch.fx.Node):
        return False
    before, after = source.meta.get("val"), clone.meta.get("val")
    if not (has_static_layout(before) and has_static_layout(after)):
        return False
    if before.dim() < 2 or before.device.type != "cuda":
        return False
    if not after.is_contiguous() or min(before.shape[-2:]) < 2:
        return False
    return before.stride(-1) != 1 and before.stride(-2) == 1


def _product_reader(clone: torch.fx.Node) -> torch.fx.Node | None:
    """The shape view between the copy and its product (or the copy itself)
    when the product is the copy's only reader."""
    users = list(clone.users)
    if len(users) != 1:
        return None
    reader = users[0]
    if reader.target in _PRODUCTS:
        return clone
    if reader.target not in SHAPE_VIEWS or len(reader.users) != 1:
        return None
    if next(iter(reader.users)).target not in _PRODUCTS:
        return None
    shape = reader.meta.get("val")
    if not isinstance(shape, torch.Tensor) or shape.shape[-2:] != clone.meta["val"].shape[-2:]:
        return None
    return reader


def copy_transposed_operands(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites ``gm`` in place (Note [Transposed operands copied
    untransposed]); returns how many copies now keep the innermost dim."""
    graph = gm.graph
    clones = list(graph.find_nodes(op="call_function", target=aten.clone.default))
    if not clones:
        return 0
    returned = returned_nodes(gm)
    rewritten = 0
    for clone in clones:
        if clone in returned or not _transposing_copy(clone):
            continue
        last = _product_reader(clone)
        if last is None or last in returned:
            continue
        fake_mode = detect_fake_mode([clone.meta["val"]])
        if fake_mode is None:
            continue
        rank = clone.meta["val"].dim()
        swap = [*range(rank - 2), rank - 1, rank - 2]
        with fake_mode:
            if last is not clone:
                # The product reads a view of the transpose: it must exist.
                value = clone.meta["val"]
                probe = torch.empty(
                    (*value.shape[:-2], value.shape[-1], value.shape[-2]),
                    dtype=value.dtype,
                    device=value.device,
                ).permute(swap)
                try:
                    aten.view.default(probe, last.meta["val"].shape)
                except RuntimeError:
                    continue
            with graph.inserting_before(clone):
                untransposed = call_with_value(graph, aten.permute.default, (clone.args[0], swap))
                copy = call_with_value(
                    graph,
                    aten.clone.default,
                    (untransposed,),
                    {"memory_format": torch.contiguous_format},
                )
                transposed = call_with_value(graph, aten.permute.default, (copy, swap))
            if last is clone:
                clone.replace_all_uses_with(transposed)
            else:
                with graph.inserting_before(last):
                    shape = list(last.meta["val"].shape)
                    view = call_with_value(graph, aten.view.default, (transposed, shape))
                view.meta = {**last.meta, "val": view.meta["val"]}
                last.replace_all_uses_with(view)
                graph.erase_node(last)
        copy.meta = {**clone.meta, "val": copy.meta["val"]}
        graph.erase_node(clone)
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten
