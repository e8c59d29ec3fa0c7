"""Attention masks fused kernels can take: one rewrite of the dynamo graph
before aot_autograd.

Note [Attention masks with a broadcast last dim]
``scaled_dot_product_attention`` is a composite op: which kernel it becomes
(flash, memory-efficient, cuDNN, or the math path of bmm, softmax, bmm) is
decided while aot_autograd traces it, from the inputs' metadata. Every fused
kernel needs the mask's last dim to have stride 1. Masks built by expanding
a smaller tensor may not: transformers' BERT under torch.compile passes a
bool mask [B, 1, S, S] with strides (0, S, 1, 0). The trace then picks the
math path, which upcasts bf16 to fp32, runs two fp32 batched products and a
``_safe_softmax`` of several kernels: on an H100 most of BERT-base's
attention time, where eager (which sees no mask there) runs one fused kernel.

Two rewrites, by the mask's last stride:

* 0: the mask is constant along the keys, so each query row is either
  attended over every key or over none. Softmax ignores a constant added to
  a row, so a kept row is attention without a mask, and the math path makes
  a fully masked row zero (``_safe_softmax``). The call becomes attention
  without a mask (flash or cuDNN, the fastest kernels) and ``where(keep, out,
  0)`` with ``keep`` the mask's first key column (``!= -inf`` for a float
  mask). Exact, and the backward is the fused kernel's, with zero gradient
  from masked rows. A mask that requires grad is copied instead (below):
  the rewrite would leave its ``.grad`` None where eager gives zeros.
* anything else but 1: the mask is copied contiguous (one copy of the mask
  per call), which the fused kernels accept. A fully masked row then follows
  the fused kernel's convention, as it would in eager with a dense mask.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention,)
# Its parameters in order (a builtin: no inspect.signature to bind against).
SDPA_PARAMETERS = (
    "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa",
)  # fmt: skip


def sdpa_argument(node: torch.fx.Node, name: str) -> Any:
    """One argument of an sdpa call node, by parameter name (None when left
    to its default)."""
    if name in node.kwargs:
        return node.kwargs[name]
    position = SDPA_PARAMETERS.index(name)
    return node.args[position] if position < len(node.args) else None


def sdpa_arguments_replaced(
    node: torch.fx.Node, **changes: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's (args, kwargs) with the named arguments replaced, each where
    the call passed it (a keyword where it did not)."""
    args, kwargs = list(node.args), dict(node.kwargs)
    for name, value in changes.items():
        position = SDPA_PARAMETERS.index(name)
        if name not in kwargs and position < len(args):
            args[position] = value
        else:
            kwargs[name] = value
    return tuple(args), kwargs


def _mask_argument(node: torch.fx.Node) -> torch.fx.Node | None:
    mask = sdpa_argument(node, "attn_mask")
    return mask if isinstance(mask, torch.fx.Node) else None


def _last_stride(value: Any) -> int | None:
    """The mask's last stride when it matters (more than one key, static
    size and stride); None otherwise."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    size, stride = value.shape[-1], value.stride()[-1]
    if not isinstance(size, int) or not isinstance(stride, int) or size <= 1:
        return None
    return stride


def _set_example(node: torch.fx.Node, fn: Any, *args: Any) -> None:
    """node.meta["example_value"] computed in dynamo's own fake mode."""
    values = [a.meta["example_value"] if isinstance(a, torch.fx.Node) else a for a in args]
    fake_mode = next((v.fake_mode for v in values if hasattr(v, "fake_mode")), None)
    if fake_mode is not None:
        with fake_mode:
            node.meta["example_value"] = fn(*values)


def _without_mask(graph: torch.fx.Graph, node: torch.fx.Node, mask: torch.fx.Node) -> None:
    """sdpa(q, k, v, mask constant along keys) -> where(keep, sdpa(q, k, v), 0)."""
    args, kwargs = sdpa_arguments_replaced(node, attn_mask=None)
    float_mask = mask.meta["example_value"].dtype != torch.bool
    with graph.inserting_before(node):
        column = graph.call_function(torch.narrow, (mask, -1, 0, 1))
        _set_example(column, torch.narrow, mask, -1, 0, 1)
        keep = column
        if float_mask:
            keep = graph.call_function(torch.ne, (column, float("-inf")))
            _set_example(keep, torch.ne, column, float("-inf"))
        attention = graph.call_function(node.target, args, kwargs)
        attention.meta = dict(node.meta)
    with graph.inserting_after(attention):
        masked = graph.call_function(torch.where, (keep, attention, 0.0))
    masked.meta = dict(node.meta)
    node.replace_all_uses_with(masked)
    graph.erase_node(node)


def rewrite_attention_masks(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Rewrites each SDPA call whose mask's last stride is not 1; returns the
    number rewritten (Note [Attention masks with a broadcast last dim]). With
    ``recompile=False`` the caller regenerates ``gm``'s code."""
    graph = gm.graph
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_TARGETS:
            continue
        mask = _mask_argument(node)
        stride = _last_stride(mask.meta.get("example_value")) if mask is not None else None
        if mask is None or stride is None or stride == 1:
            continue
        rewritten += 1
        # A mask that needs a gradient keeps its use (the rewrite would leave its .grad None).
        if stride == 0 and not mask.meta["example_value"].requires_grad:
            _without_mask(graph, node, mask)
            continue
        if mask not in copies:
            with graph.inserting_after(mask):
                copies[mask] = graph.call_method("contiguous", (mask,))
            _set_example(copies[mask], torch.Tensor.contiguous, mask)
        node.replace_input_with(mask, copies[mask])
    if rewritten and recompile:
        gm.recompile()
    return rewritten
