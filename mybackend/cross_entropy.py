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
    grad_loss: Tensor, x: Tensor, target: Tensor, lse: Tensor, ignore_index: int
) -> Tensor:
    """grad_loss * (softmax(x) - onehot(target)) per row, in x's dtype;
    zero for ignored rows."""
    kept = target != ignore_index
    scale = torch.where(kept, grad_loss, 0.0).unsqueeze(1)
    grad = torch.exp(x.float() - lse.unsqueeze(1)) * scale
    grad = grad.scatter_add(1, torch.where(kept, target, 0).unsqueeze(1), -scale)
    return grad.to(x.dtype)


@cross_entropy_backward.register_fake
def _cross_entropy_backward_fake(
    grad_loss: Tensor, x: Tensor, target: Tensor, lse: Tensor, ignore_index: int
) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


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


def fused_cross_entropy(x: Tensor, target: Tensor, ignore_index: int, reduction: str) -> Tensor:
    """``F.cross_entropy(x.float(), target, ignore_index=..., reduction=...)``
    through the fused ops (Note [Fused cross-entropy])."""
    loss, _ = torch.ops.mybackend.cross_entropy_forward(x, target, ignore_index)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (target != ignore_index).sum().to(total.dtype)


def _example(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


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
    value = _example(source)
    if not isinstance(source, torch.fx.Node) or not isinstance(value, Tensor):
        return None
    return source if value.dtype in (torch.bfloat16, torch.float16) else None


def _fusable_call(node: torch.fx.Node, devices: Collection[str]) -> dict[str, Any] | None:
    """The call's bound arguments when it can become fused_cross_entropy."""
    try:
        bound = _SIGNATURE.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    a = bound.arguments
    x, target, result = _example(a["input"]), _example(a["target"]), _example(node)
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


def rewrite_cross_entropy(gm: torch.fx.GraphModule, devices: Collection[str] | None = None) -> int:
    """Replaces each fusable ``F.cross_entropy`` call of a dynamo graph with
    ``fused_cross_entropy``; returns how many (Note [Fused cross-entropy])."""
    graph = gm.graph
    allowed = REWRITTEN_DEVICES if devices is None else devices
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not F.cross_entropy:
            continue
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
    if rewritten:
        gm.recompile()
    return rewritten
