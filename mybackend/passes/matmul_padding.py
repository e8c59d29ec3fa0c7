"""Aligned matrix products: pad what cuBLASLt's fast kernels cannot take.

Note [Aligned matrix products]
The tensor-core GEMM kernels of cuBLASLt load and store through TMA, which
needs every matrix's leading dimension to be a multiple of 16 bytes. A
product with a misaligned one gets a slow fallback kernel: GPT-2's output
layer, 8192x768 by 768x50257 in bf16, takes 6.6 ms on an H100 with its
50257-wide output, and 0.9 ms with the weight padded to 50264 rows and the
output cut back to 50257 columns (a probe of both, 2026-11-22).

Per ``mm``/``addmm`` of 16-bit CUDA tensors with static sizes, this pass
views each operand as a row-major matrix S, or the transpose of one, so
that its leading dimension is S's row length, and pads the product's
dimensions:

* N, when the output's rows (N wide) are misaligned: B's source gains
  columns (or rows, when B is a transposed view), the output is sliced back;
* K, when an operand's leading dimension is K and misaligned: both sources
  gain zero columns/rows along K, so the extra terms add zero;
* M, when A is a transposed view whose leading dimension M is misaligned:
  A's source gains columns, the output's extra rows are sliced off.

A source padded the same way twice (GPT-2's backward pads the output
gradient for both of its products) is padded once; a cross-entropy
gradient is written padded by its kernel (Note [Padded cross-entropy
gradient] in mybackend/ops/cross_entropy.py). Padding costs a copy of
each source: the pass pads only when that copy, at copy bandwidth, is under
three times the aligned product's time at the matrix units' peak (the
misaligned kernel measured 5-7 times slower). In inference graphs a source
made only of parameters is padded once by the hoisting pass after this one.

The sliced output has padded row strides. FakeTensor propagation carries
them to the nodes after it; a ``view`` they cannot express gets a
contiguous copy first. Outputs of inference graphs keep the padded strides,
as Inductor's do, and a caller that needs contiguous memory calls
``.contiguous()``. Training graphs are padded on the joint graph, before
aot_autograd splits it (aot.py's partition function), so a tensor the
forward saves for the backward (GPT-2's logits, read again by the
cross-entropy backward; the padded weight, read again by the input
gradient's product) is one node of both graphs and keeps its padded
strides: copying the logits back to their traced strides cost 0.72 ms of a
19 ms GPT-2 step. The joint graph's outputs (forward outputs and
gradients) get their traced strides back. Forward and backward graphs
padded one by one (when joint planning fails) return their outputs in
their traced strides too: the other graph was traced with them. A product
that an ``as_strided`` reads (directly or through views) is not padded: it
addresses storage with the traced strides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode

from mybackend.lowering.graph_modules import new_graph_module
from mybackend.ops.cross_entropy import pad_cross_entropy_gradients
from mybackend.passes.fake_prop import (
    Repropagation,
    copy_graph,
    insert_clone,
    output_values,
    restore_output_strides,
)
from mybackend.passes.layout_contracts import honour_layout_contracts

aten = torch.ops.aten
_ALIGN_BYTES = 16
_DTYPES = (torch.bfloat16, torch.float16)
# Conservative H100/H200 rates: dense 16-bit matrix units and device copy
# bandwidth counted as bytes read plus written.
_MATMUL_FLOPS = 600e12
_COPY_BYTES_PER_S = 3e12
_MAX_COPY_TO_PRODUCT = 3.0
_MAX_ROUNDS = 16
_TRANSPOSES = (aten.t.default, aten.permute.default, aten.transpose.int)


def _round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


@dataclasses.dataclass
class _Operand:
    """An mm operand as S (row-major source) or S transposed."""

    node: torch.fx.Node
    transposed: bool  # the operand is t(S)
    leading: int  # S's row stride


def _operand(node: torch.fx.Node) -> _Operand | None:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() != 2:
        return None
    sizes, strides = value.shape, value.stride()
    if not all(isinstance(x, int) for x in (*sizes, *strides)):
        return None
    if strides[1] == 1 and strides[0] >= sizes[1]:
        return _Operand(node, False, strides[0])
    if strides[0] == 1 and strides[1] >= sizes[0]:
        return _Operand(node, True, strides[1])
    return None


def _is_transpose_2d(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _TRANSPOSES:
        return False
    if node.target is aten.permute.default:
        return list(node.args[1]) == [1, 0]  # type: ignore[arg-type]
    if node.target is aten.transpose.int:
        return sorted(int(d) % 2 for d in node.args[1:3]) == [0, 1]  # type: ignore[call-overload]
    return True


def _without_double_transposes(node: torch.fx.Node) -> torch.fx.Node:
    """S for t(t(S)): a backward reads the forward's weight as the transpose
    of its transposed view (mm's gradient formula), and both products must
    find the same source to share its padding."""
    while _is_transpose_2d(node) and _is_transpose_2d(node.args[0]):  # type: ignore[arg-type]
        node = node.args[0].args[0]  # type: ignore[union-attr,assignment]
    return node


@dataclasses.dataclass(frozen=True)
class _Plan:
    m: int
    k: int
    n: int
    padded_m: int
    padded_k: int
    padded_n: int

    @property
    def changes(self) -> bool:
        return (self.padded_m, self.padded_k, self.padded_n) != (self.m, self.k, self.n)


def _plan(a: _Operand, b: _Operand, m: int, k: int, n: int, align: int) -> _Plan:
    misaligned = [x % align != 0 for x in (a.leading, b.leading)]
    padded_n = _round_up(n, align) if n % align else n
    # A's leading dimension is K (row-major) or M (transposed); B's is N or K.
    padded_m = _round_up(m, align) if a.transposed and misaligned[0] else m
    k_is_leading = (not a.transposed and misaligned[0]) or (b.transposed and misaligned[1])
    padded_k = _round_up(k, align) if k_is_leading else k
    return _Plan(m, k, n, padded_m, padded_k, padded_n)


class _Padder:
    """Inserts the padded sources and products; shares a source's padding."""

    def __init__(self, graph: torch.fx.Graph, align: int) -> None:
        self.graph = graph
        self.align = align
        self.padded: dict[tuple[torch.fx.Node, bool, int, int], torch.fx.Node] = {}

    def _source(self, operand: _Operand, rows: int, cols: int) -> tuple[Any, ...]:
        """S, whether S is inserted as t(operand), S's sizes now and padded."""
        node, needs_t = _without_double_transposes(operand.node), operand.transposed
        if operand.transposed and _is_transpose_2d(node):
            node, needs_t = _without_double_transposes(node.args[0]), False
        size = tuple(operand.node.meta["val"].shape)
        if operand.transposed:  # S is [cols, rows] of the operand
            return node, needs_t, size[::-1], (cols, rows)
        return node, needs_t, size, (rows, cols)

    def _unchanged(self, operand: _Operand, size: tuple[int, ...], padded: tuple[int, int]) -> bool:
        return tuple(size) == padded and operand.leading % self.align == 0

    def copy_bytes(self, operand: _Operand, rows: int, cols: int) -> int:
        """Bytes read and written to pad the operand's source (0 if shared or not needed)."""
        source, needs_t, size, padded = self._source(operand, rows, cols)
        if self._unchanged(operand, size, padded) or (source, needs_t, *padded) in self.padded:
            return 0
        element = operand.node.meta["val"].element_size()
        return (size[0] * size[1] + padded[0] * padded[1]) * element

    def pad(self, operand: _Operand, rows: int, cols: int, before: torch.fx.Node) -> torch.fx.Node:
        """The operand with its source padded to `rows` x `cols` (of the operand)."""
        source, needs_t, size, padded = self._source(operand, rows, cols)
        if self._unchanged(operand, size, padded):
            return operand.node
        key = (source, needs_t, *padded)
        graph = self.graph
        with graph.inserting_before(before):  # products are visited in order: the first reader
            if key not in self.padded:
                s = graph.call_function(aten.t.default, (source,)) if needs_t else source
                pads = [0, padded[1] - size[1], 0, padded[0] - size[0]]
                self.padded[key] = graph.call_function(aten.constant_pad_nd.default, (s, pads))
            result = self.padded[key]
            if operand.transposed:
                result = graph.call_function(aten.t.default, (result,))
        return result


_VIEWS = (
    aten.view.default,
    aten._unsafe_view.default,
    aten.slice.Tensor,
    aten.select.int,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.expand.default,
    aten.alias.default,
)


def _read_as_raw_storage(node: torch.fx.Node) -> bool:
    """Whether the product (or a view of it) reaches an as_strided, which
    addresses storage with the traced strides and would read the padding."""
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        for user in current.users:
            if user in seen:
                continue
            seen.add(user)
            if user.op == "call_function" and "as_strided" in str(user.target):
                return True
            if user.op == "call_function" and user.target in _VIEWS:
                pending.append(user)
    return False


def _worth_it(plan: _Plan, copy_bytes: int) -> bool:
    product_s = 2 * plan.padded_m * plan.padded_k * plan.padded_n / _MATMUL_FLOPS
    return copy_bytes / _COPY_BYTES_PER_S < _MAX_COPY_TO_PRODUCT * product_s


def _bias_of(node: torch.fx.Node, n: int) -> torch.fx.Node | None:
    """addmm's bias when it is a vector over N (the pattern of linear layers)."""
    bias = node.args[0]
    value = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
    if isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape[0] == n:
        return bias  # type: ignore[return-value]
    return None


def _misaligned_product(
    node: torch.fx.Node, device_types: Sequence[str]
) -> tuple[_Operand, _Operand, _Plan, int] | None:
    """A 16-bit ``mm``/``addmm`` on ``device_types`` that padding would
    change: its operands, its plan and the alignment in elements; else None."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
        return None
    a_node, b_node = node.args[1:3] if node.target is aten.addmm.default else node.args[0:2]
    out = node.meta.get("val")
    if not isinstance(a_node, torch.fx.Node) or not isinstance(b_node, torch.fx.Node):
        return None
    if not isinstance(out, torch.Tensor) or out.dtype not in _DTYPES:
        return None
    if out.device.type not in device_types:
        return None
    a, b = _operand(a_node), _operand(b_node)
    if a is None or b is None:
        return None
    (m, k), n = a_node.meta["val"].shape, b_node.meta["val"].shape[1]
    align = _ALIGN_BYTES // out.element_size()
    plan = _plan(a, b, m, k, n, align)
    if not plan.changes or min(m, k, n) < 16:
        return None
    return a, b, plan, align


def _pad_products(graph: torch.fx.Graph, device_types: Sequence[str]) -> int:
    padders: dict[int, _Padder] = {}
    rewritten = 0
    for node in list(graph.nodes):
        found = _misaligned_product(node, device_types)
        if found is None or _read_as_raw_storage(node):
            continue
        a, b, plan, align = found
        addmm = node.target is aten.addmm.default
        m, n = plan.m, plan.n
        bias = _bias_of(node, n) if addmm else None
        if addmm and bias is None:
            continue  # a full [M, N] bias would need its own copy
        padder = padders.setdefault(align, _Padder(graph, align))
        cost = padder.copy_bytes(a, plan.padded_m, plan.padded_k)
        cost += padder.copy_bytes(b, plan.padded_k, plan.padded_n)
        if not _worth_it(plan, cost):
            continue
        new_a = padder.pad(a, plan.padded_m, plan.padded_k, node)
        new_b = padder.pad(b, plan.padded_k, plan.padded_n, node)
        with graph.inserting_before(node):
            if addmm:
                if plan.padded_n != n:
                    pads = [0, plan.padded_n - n]
                    bias = graph.call_function(aten.constant_pad_nd.default, (bias, pads))
                product = graph.call_function(
                    aten.addmm.default, (bias, new_a, new_b), dict(node.kwargs)
                )
            else:
                product = graph.call_function(aten.mm.default, (new_a, new_b))
            result = product
            if plan.padded_m != m:
                result = graph.call_function(aten.slice.Tensor, (result, 0, 0, m))
            if plan.padded_n != n:
                result = graph.call_function(aten.slice.Tensor, (result, 1, 0, n))
        product.meta = {key: v for key, v in node.meta.items() if key != "val"}
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def pad_matmuls(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    kind: str,
    device_types: Sequence[str] = ("cuda",),
    *,
    recompile: bool = True,
) -> tuple[torch.fx.GraphModule, int]:
    """A copy of ``gm`` whose misaligned matrix products are padded, and the
    number padded; ``gm`` itself (and 0) when none is or propagation fails
    (Note [Aligned matrix products]). With ``recompile=False`` the copy's
    generated code is left stale for a caller that recompiles before
    anything runs it (Note [One recompile per joint graph] in aot.py)."""
    if detect_fake_mode(example_inputs) is None:
        return gm, 0
    # Most graphs have no product to pad (every CPU graph, all of ResNet-50's):
    # asked first, on gm's own nodes, that needs none of the graph copy, module
    # and propagation state below (for ResNet-50's joint, forward and backward
    # graphs, 0.4-0.5 s of its first training call on a 2-core CPU machine).
    if not any(_misaligned_product(node, device_types) for node in gm.graph.nodes):
        return gm, 0
    original = output_values(gm)
    graph, traced = copy_graph(gm)
    padded = new_graph_module(gm, graph)
    propagation = Repropagation(padded)
    try:
        count = _pad_products(graph, device_types)
        if count == 0:
            return gm, 0
        pad_cross_entropy_gradients(graph)
        for _ in range(_MAX_ROUNDS):
            view = propagation.until_view_fails(example_inputs)
            if view is None:  # Note [Layout contracts]: last, on settled strides
                if honour_layout_contracts(graph, traced) == 0:
                    break
                continue
            source = view.args[0]
            assert isinstance(source, torch.fx.Node)
            view.replace_input_with(
                source, insert_clone(graph, source, view, torch.contiguous_format)
            )
        else:
            return gm, 0
        if kind != "inference":
            restore_output_strides(padded, original)
        if recompile:
            padded.recompile()
    except Exception:  # padding is an optimisation: never a compile failure
        return gm, 0
    return padded, count
