"""Cross-entropy as two fused ops: one rewrite of the dynamo graph before
aot_autograd.

Note [Fused cross-entropy]
``F.cross_entropy(logits, target)`` over a language model's vocabulary is
the largest elementwise work of its training step: GPT-2 at 16 x 256 tokens
has 4096 x 50257 logits. Under autocast, aot_autograd traces it as an fp32
copy of the bf16 logits, ``_log_softmax`` and ``nll_loss``; the min-cut
partitioner cannot recompute ``_log_softmax``, so the forward writes an fp32
log-softmax (823 MB) for the backward, and the backward reads it, builds an
fp32 one-hot gradient, runs ``_log_softmax_backward_data`` and casts the
result back to bf16: on an H100 about 5 ms of a 24 ms step, where one read
of the bf16 logits forward and one read plus one write backward (about
1.2 GB, 0.4 ms) is the floor.

So, before aot traces it, each such call becomes ``fused_cross_entropy``:

* ``mybackend::cross_entropy_forward(x, target, ignore_index)`` gives the
  per-row loss ``lse - x[target]`` (0 for ignored rows) and the per-row
  ``lse = log(sum(exp(x)))``, both fp32, reading the logits once;
* the reduction (``sum``, or the mean over rows not ignored, as
  ``nll_loss`` takes it) is ordinary ATen ops on 4096 values;
* its autograd formula is ``mybackend::cross_entropy_backward(grad, x,
  target, lse, ignore_index) = grad * (exp(x - lse) - onehot(target))`` in
  the logits' dtype, one read and one write.

What is saved for the backward is the logits themselves (the output layer's
product needs its inputs, not its output, so they were not saved before)
and 4096 fp32 values. The C++ core generates both kernels
(``device/mb_cross_entropy.cuh``, reading logits with a row stride, so the
padded output layer of Note [Aligned matrix products] needs no copy); on
the CPU, or when a kernel cannot run, the ops' ATen implementations below
run instead.

Only calls whose math is fp32 are rewritten: fp32 logits, or bf16/fp16
logits that autocast upcasts (the call's traced result is fp32). Then
reading the bf16 values into fp32 registers is exactly autocast's cast. A
``.float()`` (or ``.to(float32)``) of bf16/fp16 logits read only by the
call is dropped the same way, also when views reshape the upcast logits to
[rows, classes] first, as transformers' causal-LM loss and most training
loops do (``logits.float().view(-1, vocab)``): the views are replayed on
the 16-bit logits. Kept, that upcast wrote 823 MB of fp32 logits for
GPT-2 at batch 16 and the gradient came back through an fp32 copy: 1.0 ms
of casts and twice the bytes in both kernels. Class weights, label
smoothing, probability targets, logits that are not [rows, classes] and the
legacy ``size_average``/``reduce`` arguments keep the call as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import Tensor

from mybackend.ops.dynamo_calls import bound_arguments, example_value

# Where the rewrite applies: the fused kernels are CUDA kernels. Tests widen
# it to run the whole path on the CPU (through the ATen implementations).
REWRITTEN_DEVICES: Collection[str] = ("cuda",)

_REDUCTIONS = ("mean", "sum", "none")
_SHAPE_METHODS = ("view", "reshape", "flatten")
_SHAPE_FUNCTIONS = (torch.reshape, torch.flatten)
_LOGITS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_SIGNATURE = inspect.signature(F.cross_entropy)


@torch.library.custom_op("mybackend::cross_entropy_forward", mutates_args=())
def cross_entropy_forward(x: Tensor, target: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Per-row loss and log-sum-exp of logits x [rows, classes], in fp32."""
    logits = x.float()
    lse = torch.logsumexp(logits, dim=1)
    kept = target != ignore_index
    picked = logits.gather(1, torch.where(kept, target, 0).unsqueeze(1)).squeeze(1)
    return torch.where(kept, lse - picked, 0.0), lse


@cross_entropy_forward.register_fake
def _cross_entropy_forward_fake(
    x: Tensor, target: Tensor, ignore_index: int
) -> tuple[Tensor, Tensor]:
    rows = x.new_empty(x.shape[0], dtype=torch.float32)
    return rows, torch.empty_like(rows)


@torch.library.custom_op("mybackend::cross_entropy_backward", mutates_args=())
def cross_entropy_backward(
    grad_loss: Tensor, x: Tensor, target: Tensor, lse: Tensor, ignore_index: int, pad: int = 0
) -> Tensor:
    """grad_loss * (softmax(x) - onehot(target)) per row, in x's dtype;
    zero for ignored rows; ``pad`` zero columns after each row (Note
    [Padded cross-entropy gradient])."""
    if pad < 0:
        raise ValueError(f"cross_entropy_backward: pad must be >= 0, got {pad}")
    kept = target != ignore_index
    scale = torch.where(kept, grad_loss, 0.0).unsqueeze(1)
    grad = torch.exp(x.float() - lse.unsqueeze(1)) * scale
    grad = grad.scatter_add(1, torch.where(kept, target, 0).unsqueeze(1), -scale)
    return F.pad(grad.to(x.dtype), (0, pad)) if pad else grad.to(x.dtype)


@cross_entropy_backward.register_fake
def _cross_entropy_backward_fake(
    grad_loss: Tensor, x: Tensor, target: Tensor, lse: Tensor, ignore_index: int, pad: int = 0
) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1] + pad)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, target, ignore_index = inputs
    ctx.save_for_backward(x, target, output[1])
    ctx.ignore_index = ignore_index


def _backward(ctx: Any, grad_loss: Tensor | None, grad_lse: Tensor | None) -> tuple[Any, ...]:
    # lse never leaves fused_cross_entropy, so no gradient reaches it.
    x, target, lse = ctx.saved_tensors
    if grad_loss is None or not ctx.needs_input_grad[0]:
        return None, None, None
    grad = torch.ops.mybackend.cross_entropy_backward(grad_loss, x, target, lse, ctx.ignore_index)
    return grad, None, None


cross_entropy_forward.register_autograd(_backward, setup_context=_setup_context)


def _fused_cross_entropy(x: Tensor, target: Tensor, ignore_index: int, reduction: str) -> Tensor:
    loss, _ = torch.ops.mybackend.cross_entropy_forward(x, target, ignore_index)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (target != ignore_index).sum().to(total.dtype)


# The rewrite puts an operator into the dynamo graph, not a Python function:
# torch's AOTAutogradCache keeps only graphs whose every call it can name
# (check_node_safe in autograd_cache.py), and a function there made each
# training graph with a fused loss bypass warm start (Note [Warm start]).
# CompositeImplicitAutograd: aot_autograd traces through it to the forward
# op above and the reduction, as it traced the function.
_LIBRARY = torch.library.Library("mybackend", "FRAGMENT")
_LIBRARY.define(
    "fused_cross_entropy(Tensor x, Tensor target, int ignore_index, str reduction) -> Tensor"
)
_LIBRARY.impl("fused_cross_entropy", _fused_cross_entropy, "CompositeImplicitAutograd")
# ``F.cross_entropy(x.float(), target, ignore_index=..., reduction=...)``
# through the fused ops (Note [Fused cross-entropy]).
fused_cross_entropy = torch.ops.mybackend.fused_cross_entropy.default


_ATEN = torch.ops.aten
_ROW_VIEWS = (_ATEN.view.default, _ATEN._unsafe_view.default)
# Views a rewrite leaves behind unread (matmul padding replaces a product's
# operands, not the old transposes of them).
_VIEWS = (*_ROW_VIEWS, _ATEN.t.default, _ATEN.permute.default, _ATEN.transpose.int)


def _dead_views(node: torch.fx.Node) -> list[torch.fx.Node]:
    return [u for u in node.users if u.target in _VIEWS and not u.users]


def _read_once(node: torch.fx.Node) -> bool:
    return len(node.users) - len(_dead_views(node)) == 1


def _padded_gradient_chain(pad: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """For ``constant_pad_nd(v, [0, p])`` of a cross-entropy gradient ``g``
    seen through views ``v`` that keep its rows (read by nothing else):
    ``g`` and the views, innermost first; else None."""
    pads = pad.args[1] if len(pad.args) > 1 else None
    value = pad.args[2] if len(pad.args) > 2 else pad.kwargs.get("value", 0)
    if not isinstance(pads, list | tuple) or len(pads) < 2 or value != 0:
        return None
    if pads[0] != 0 or any(p != 0 for p in pads[2:]) or not pads[1] > 0:
        return None
    views: list[torch.fx.Node] = []
    node = pad.args[0]
    while isinstance(node, torch.fx.Node) and node.target in _ROW_VIEWS:
        views.insert(0, node)
        node = node.args[0]
    if not isinstance(node, torch.fx.Node):
        return None
    if node.target is not torch.ops.mybackend.cross_entropy_backward.default:
        return None
    if len(node.args) != 5 or node.kwargs:  # already padded
        return None
    cols = node.args[1].meta["val"].shape[-1] if isinstance(node.args[1], torch.fx.Node) else None
    if not all(_read_once(n) for n in [node, *views]):
        return None
    for view in views:
        shape = view.args[1]
        if not isinstance(shape, list | tuple) or not shape or shape[-1] != cols:
            return None
    return node, views


def pad_cross_entropy_gradients(graph: torch.fx.Graph) -> int:
    """Note [Padded cross-entropy gradient]
    The output layer's padded product (Note [Aligned matrix products])
    reads the logits' gradient through ``constant_pad_nd``: ATen fills a
    [rows, classes + p] buffer with zeros and copies the gradient in, about
    0.65 ms per GPT-2 step at batch 16 on an H100 (4096 x 50264 bf16, three
    passes over 412 MB). The cross-entropy backward writes that buffer
    itself: ``cross_entropy_backward(..., pad=p)`` stores each row followed
    by p zeros, and the views between it and the pad are replayed on the
    wider rows. Returns how many pads were replaced; the graph's nodes lose
    their metadata's values, so the caller propagates again."""
    replaced = 0
    for pad in list(graph.nodes):
        if pad.op != "call_function" or pad.target is not _ATEN.constant_pad_nd.default:
            continue
        chain = _padded_gradient_chain(pad)
        if chain is None:
            continue
        gradient, views = chain
        extra = pad.args[1][1]  # type: ignore[index]
        with graph.inserting_before(pad):
            result = graph.call_function(gradient.target, (*gradient.args, extra))
            for view in views:
                shape = [*view.args[1][:-1], view.args[1][-1] + extra]  # type: ignore[index]
                result = graph.call_function(view.target, (result, shape))
        pad.replace_all_uses_with(result)
        for dead in [pad, *reversed(views), gradient]:
            for view in _dead_views(dead):
                graph.erase_node(view)
            graph.erase_node(dead)
        replaced += 1
    return replaced


def _is_shape_view(node: torch.fx.Node) -> bool:
    """A view, reshape or flatten of its first argument read by one node:
    one that gives the same values on a tensor of another dtype."""
    if len(node.users) != 1 or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.op == "call_method":
        return node.target in _SHAPE_METHODS
    return node.op == "call_function" and node.target in _SHAPE_FUNCTIONS


def _views_of_upcast(node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node | None]:
    """The shape views between the call's logits ``node`` and an upcast
    (innermost first), and the upcast's 16-bit source; ``[], None`` when
    the logits are no upcast read only by the call."""
    views: list[torch.fx.Node] = []
    while _is_shape_view(node):
        views.insert(0, node)
        node = node.args[0]  # type: ignore[assignment]
    source = _upcast_source(node)
    return (views, source) if source is not None else ([], None)


def _upcast_source(node: torch.fx.Node) -> torch.fx.Node | None:
    """The bf16/fp16 tensor that ``node`` (a ``.float()`` or ``.to(float32)``
    read by one node) upcasts, else None."""
    if node.op != "call_method" or len(node.users) != 1 or not node.args:
        return None
    dtype_args = [*node.args[1:], *node.kwargs.values()]
    if node.target == "float":
        if dtype_args:
            return None
    elif node.target != "to" or dtype_args != [torch.float32]:
        return None
    source = node.args[0]
    value = example_value(source)
    if not isinstance(source, torch.fx.Node) or not isinstance(value, Tensor):
        return None
    return source if value.dtype in (torch.bfloat16, torch.float16) else None


def _fusable_call(node: torch.fx.Node, devices: Collection[str]) -> dict[str, Any] | None:
    """The call's bound arguments when it can become fused_cross_entropy."""
    a = bound_arguments(node, _SIGNATURE)
    if a is None:
        return None
    x, target, result = example_value(a["input"]), example_value(a["target"]), example_value(node)
    if not all(isinstance(v, Tensor) for v in (x, target, result)):
        return None
    simple = (
        a["weight"] is None
        and a["size_average"] is None
        and a["reduce"] is None
        and a["label_smoothing"] == 0.0
        and a["reduction"] in _REDUCTIONS
        and type(a["ignore_index"]) is int
    )
    shapes = x.dim() == 2 and target.dim() == 1 and target.dtype == torch.int64
    math_in_fp32 = x.dtype in _LOGITS_DTYPES and result.dtype == torch.float32
    on_device = x.device.type in devices and target.device == x.device
    return a if simple and shapes and math_in_fp32 and on_device else None


def rewrite_cross_entropy(
    gm: torch.fx.GraphModule, devices: Collection[str] | None = None, *, recompile: bool = True
) -> int:
    """Replaces each fusable ``F.cross_entropy`` call of a dynamo graph with
    ``fused_cross_entropy``; returns how many (Note [Fused cross-entropy]).
    With ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    allowed = REWRITTEN_DEVICES if devices is None else devices
    rewritten = 0
    for node in graph.find_nodes(op="call_function", target=F.cross_entropy):
        a = _fusable_call(node, allowed)
        if a is None:
            continue
        logits = a["input"]
        views, source = _views_of_upcast(logits)
        with graph.inserting_before(node):
            x = source or logits
            for view in views:  # replayed on the 16-bit logits
                x = graph.create_node(view.op, view.target, (x, *view.args[1:]), view.kwargs)
            fused = graph.call_function(
                fused_cross_entropy, (x, a["target"], a["ignore_index"], a["reduction"])
            )
        fused.meta = dict(node.meta)
        node.replace_all_uses_with(fused)
        graph.erase_node(node)
        if source is not None:
            upcast = views[0].args[0] if views else logits
            for dropped in [*reversed(views), upcast]:
                graph.erase_node(dropped)  # type: ignore[arg-type]
        rewritten += 1
    if rewritten and recompile:
        gm.recompile()
    return rewritten
