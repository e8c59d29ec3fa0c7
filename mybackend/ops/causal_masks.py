"""Constant causal masks as ``is_causal``: one rewrite of the dynamo graph
before aot_autograd.

Note [Constant causal masks]
A compiled Hugging Face decoder (Llama, Mistral, GPT-2, OPT... through
transformers' ``create_causal_mask``) calls ``scaled_dot_product_attention``
with ``is_causal=False`` and a dense bool mask [B, 1, S, S] built from
``arange``s: under tracing transformers cannot rule out packed sequences, so
it always builds the mask. The trace then picks the memory-efficient kernel
with a mask read from memory (Inductor gets the same), where the causal
flash or cuDNN kernels skip the masked half of the scores and read no mask.

When a mask depends on nothing the graph takes in (no graph input, no
attribute, no random op: only constants, as the ``arange``s are for static
sizes), its value is the same on every call. So the rewrite computes it once,
at compile time, and when it equals the causal mask (key j attended from
query i exactly when j <= i, for every batch and head it broadcasts over,
with as many queries as keys) the call becomes ``is_causal=True`` without a
mask. A float mask counts as causal when its kept entries are 0 and its
masked ones at most -1e4 (transformers fills them with the dtype's lowest
value): softmax weights of exp(-1e4) are 0 in every floating dtype, so the
result is the same. Any other mask (padding, sliding windows shorter than
the sequence, masks the model takes as input) is left as it is; so is a
mask whose computation fails or that exceeds MAX_MASK_ELEMENTS. The limit
is high because the user's program computes the same mask on every call:
computing it once more at compile time takes no memory it would not take
(a training batch of 8 at 4096 tokens has a 134M-element mask).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from mybackend.ops.attention_masks import SDPA_TARGETS, sdpa_argument, sdpa_arguments_replaced
from mybackend.ops.dynamo_calls import example_value

MAX_MASK_ELEMENTS = 1 << 30
# Masked entries of a float mask at or below this add nothing after softmax.
MASKED_AT_MOST = -1e4
# Calls whose value differs from call to call: a mask using one is not constant.
_RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "poisson",
                 "uniform", "exponential", "geometric", "cauchy", "seed")  # fmt: skip


def _static_rows(value: Any) -> int | None:
    """The second-to-last size of a tensor with static sizes, else None."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2:
        return None
    if not all(isinstance(s, int) for s in value.shape):
        return None
    return int(value.shape[-2])


def _is_random(node: torch.fx.Node) -> bool:
    name = getattr(node.target, "__name__", str(node.target)).lower()
    return any(word in name for word in _RANDOM_WORDS)


def _constant_nodes(mask: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes computing ``mask``, in graph order, when none of them reads
    an input, an attribute, a module or a random number; else None."""
    found: set[torch.fx.Node] = set()
    stack = [mask]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        if node.op not in ("call_function", "call_method") or _is_random(node):
            return None
        found.add(node)
        stack.extend(node.all_input_nodes)
    return [n for n in mask.graph.nodes if n in found]


def _evaluate(nodes: list[torch.fx.Node], owner: torch.fx.GraphModule) -> torch.Tensor | None:
    """Runs the constant nodes (their last one is the mask) for real; None
    when that fails."""
    graph = torch.fx.Graph()
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in nodes:
        copies[node] = graph.node_copy(node, lambda n: copies[n])
    graph.output(copies[nodes[-1]])
    try:
        with unset_fake_temporarily(), torch.no_grad():
            value = torch.fx.GraphModule(owner, graph)()
    except Exception:  # a call that cannot run outside the trace: leave the mask
        return None
    return value if isinstance(value, torch.Tensor) else None


def _is_causal(mask: torch.Tensor, rows: int) -> bool:
    """Whether ``mask`` (broadcast to [..., rows, rows]) keeps exactly j <= i."""
    if mask.dim() < 2 or tuple(mask.shape[-2:]) != (rows, rows):
        return False
    if mask.dtype == torch.bool:
        kept = mask
    elif mask.is_floating_point():
        kept = mask == 0
        if not bool(((mask == 0) | (mask <= MASKED_AT_MOST)).all()):
            return False
    else:
        return False
    causal = torch.ones(rows, rows, dtype=torch.bool, device=mask.device).tril()
    return bool((kept == causal).all())


def _causal_call(node: torch.fx.Node) -> tuple[torch.fx.Node, int] | None:
    """The mask node of an sdpa call that could become causal, and the
    call's query rows; else None."""
    mask = sdpa_argument(node, "attn_mask")
    if not isinstance(mask, torch.fx.Node) or sdpa_argument(node, "is_causal") not in (None, False):
        return None
    rows = _static_rows(example_value(sdpa_argument(node, "query")))
    keys = _static_rows(example_value(sdpa_argument(node, "key")))
    value = example_value(mask)
    if rows is None or rows != keys or rows < 2 or not isinstance(value, torch.Tensor):
        return None
    if value.numel() > MAX_MASK_ELEMENTS:
        return None
    return mask, rows


def rewrite_causal_masks(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Turns each sdpa call whose mask is a constant causal mask into
    ``is_causal=True`` without it; returns how many (Note [Constant causal
    masks]). With ``recompile=False`` the caller regenerates ``gm``'s code."""
    verdicts: dict[torch.fx.Node, list[torch.fx.Node] | None] = {}
    rewritten = 0
    for target in SDPA_TARGETS:
        for node in list(gm.graph.find_nodes(op="call_function", target=target)):
            call = _causal_call(node)
            if call is None:
                continue
            mask, rows = call
            if mask not in verdicts:  # transformers builds one mask for every layer
                nodes = _constant_nodes(mask)
                value = None if nodes is None else _evaluate(nodes, gm)
                causal = value is not None and _is_causal(value, rows)
                verdicts[mask] = nodes if causal else None
            if verdicts[mask] is None:
                continue
            node.args, node.kwargs = sdpa_arguments_replaced(node, attn_mask=None, is_causal=True)
            rewritten += 1
    computing = {n for nodes in verdicts.values() for n in nodes or ()}
    for node in reversed(gm.graph.nodes):  # what only the masks no call reads now read
        if node in computing and not node.users:
            gm.graph.erase_node(node)
    if rewritten and recompile:
        gm.recompile()
    return rewritten
