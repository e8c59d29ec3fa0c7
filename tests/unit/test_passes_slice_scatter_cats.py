"""mybackend/passes/slice_scatter_cats.py: sums of slices scattered into zeros
become one concatenation, or one pad (Note [Slice scatters into zeros])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.passes.slice_scatter_cats import scatters_into_zeros_as_cats
from tests.testing import assert_same_result, call_targets, traced_and_rewritten
from tests.unit.test_matmul_plan import _aot_graphs

aten = torch.ops.aten
END = 9223372036854775807  # what slice_backward's decomposition passes for "to the end"


def _rewritten(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> tuple[Any, Any, int]:
    return traced_and_rewritten(scatters_into_zeros_as_cats, fn, *inputs)


def _scatter(part: torch.Tensor, shape: list[int], dim: int, start: int, end: int) -> torch.Tensor:
    zeros = torch.ops.aten.full.default(shape, 0, dtype=part.dtype, device=part.device)
    return aten.slice_scatter.default(zeros, part, dim, start, end)


def _three_heads(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    """The backward of q, k, v = qkv[..., :4], qkv[..., 4:8], qkv[..., 8:]."""
    shape = [2, 3, 5, 12]
    q = _scatter(dq, shape, 3, 0, 4)
    k = _scatter(dk, shape, 3, 4, 8)
    v = _scatter(dv, shape, 3, 8, END)
    return (v + k) + q


def test_scatters_that_tile_a_dim_are_one_concatenation() -> None:
    inputs = tuple(torch.randn(2, 3, 5, 4) for _ in range(3))
    before, after, count = _rewritten(_three_heads, *inputs)
    assert count == 1
    targets = call_targets(after)
    assert aten.slice_scatter.default not in targets and aten.add.Tensor not in targets
    assert aten.full.default not in targets  # the zeros are read by nothing now
    (cat,) = after.graph.find_nodes(op="call_function", target=aten.cat.default)
    assert cat.args[1] == 3
    assert_same_result(before, after, inputs)


def _gapped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    shape = [4, 10]
    return _scatter(a, shape, -1, 1, 3) + _scatter(b, shape, -1, 6, 8)


def test_gaps_between_windows_are_zero_pieces() -> None:
    inputs = (torch.randn(4, 2), torch.randn(4, 2))
    before, after, count = _rewritten(_gapped, *inputs)
    assert count == 1
    (cat,) = after.graph.find_nodes(op="call_function", target=aten.cat.default)
    sizes = [p.meta["val"].shape[1] for p in cat.args[0]]
    assert sizes == [1, 2, 3, 2, 2]  # zeros, a, zeros, b, zeros
    assert_same_result(before, after, inputs)


def _lone_scatter(a: torch.Tensor) -> torch.Tensor:
    return _scatter(a, [3, 7, 5], 1, 2, 6) * 2


def test_a_lone_scatter_into_zeros_is_a_pad() -> None:
    inputs = (torch.randn(3, 4, 5),)
    before, after, count = _rewritten(_lone_scatter, *inputs)
    assert count == 1
    targets = call_targets(after)
    assert aten.slice_scatter.default not in targets and aten.full.default not in targets
    (pad,) = after.graph.find_nodes(op="call_function", target=aten.constant_pad_nd.default)
    assert pad.args[1] == [0, 0, 2, 1]
    assert_same_result(before, after, inputs)


def _overlapping(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _scatter(a, [4, 6], 1, 0, 4) + _scatter(b, [4, 6], 1, 2, 6)


def _into_ones(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ones = torch.ops.aten.full.default([4, 6], 1.0)
    return aten.slice_scatter.default(ones, a, 1, 0, 3) + _scatter(b, [4, 6], 1, 3, 6)


def _promoting(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _scatter(a, [4, 6], 1, 0, 3) + _scatter(b.double(), [4, 6], 1, 3, 6)


def _negative_zeros(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    zeros = torch.ops.aten.full.default([4, 6], -0.0)
    return aten.slice_scatter.default(zeros, a, 1, 0, 3) + aten.slice_scatter.default(
        zeros, b, 1, 3, 6
    )


@pytest.mark.parametrize(
    ("fn", "b_cols", "pads"),
    [(_overlapping, 4, 2), (_into_ones, 3, 1), (_promoting, 3, 2), (_negative_zeros, 3, 0)],
    ids=["overlapping", "base_not_zero", "promoting_add", "negative_zero_base"],
)
def test_sums_the_note_does_not_describe_are_left_alone(
    fn: Callable[..., Any], b_cols: int, pads: int
) -> None:
    """No concatenation; each scatter into (+0) zeros alone is still a pad."""
    a_cols = 4 if fn is _overlapping else 3
    inputs = (torch.randn(4, a_cols), torch.randn(4, b_cols))
    before, after, count = _rewritten(fn, *inputs)
    assert count == pads
    assert call_targets(after).count(aten.constant_pad_nd.default) == pads
    assert aten.cat.default not in call_targets(after)
    assert aten.add.Tensor in call_targets(after)
    want, got = before(*inputs), after(*inputs)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _inner_sum_read_twice(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    shape = [2, 9]
    inner = _scatter(a, shape, 1, 0, 3) + _scatter(b, shape, 1, 3, 6)
    return (inner + _scatter(c, shape, 1, 6, 9)) * inner


def test_an_inner_sum_read_elsewhere_is_its_own_root() -> None:
    inputs = (torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    before, after, count = _rewritten(_inner_sum_read_twice, *inputs)
    # The outer sum is not one (its inner add has a second reader); the
    # inner sum is a concatenation with a zero piece, the third scatter a pad.
    assert count == 2
    assert call_targets(after).count(aten.cat.default) == 1
    assert call_targets(after).count(aten.constant_pad_nd.default) == 1
    assert aten.slice_scatter.default not in call_targets(after)
    assert_same_result(before, after, inputs)


def _rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Partial rotary embeddings (GPT-NeoX): a quarter of each head rotated."""
    rot = q.shape[-1] // 4
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    x1, x2 = q_rot[..., : rot // 2], q_rot[..., rot // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat((q_rot * cos + rotated * sin, q_pass), dim=-1)


class _Rope(torch.nn.Module):
    def forward(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k = qkv[..., :16], qkv[..., 16:32]
        return _rope(q, cos, sin) * _rope(k, cos, sin)


def test_rotary_embeddings_backward_has_no_scatter_left_and_the_same_gradients() -> None:
    qkv = torch.randn(2, 3, 6, 48, requires_grad=True)
    cos, sin = torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4)
    backward = _aot_graphs(_Rope(), qkv, cos, sin)["backward"]
    assert aten.slice_scatter.default in call_targets(backward)
    inputs = [n.meta["val"] for n in backward.graph.find_nodes(op="placeholder")]
    real = [torch.randn(v.shape).as_strided(v.shape, v.stride()) for v in inputs]
    want = backward(*real)
    assert scatters_into_zeros_as_cats(backward) > 0
    backward.graph.lint()
    assert aten.slice_scatter.default not in call_targets(backward)
    got = backward(*real)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
        else:
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_symbolic_sizes_are_left_alone() -> None:
    """Windows are compared as plain integers; a graph traced with symbolic
    sizes keeps its scatters."""
    inputs = tuple(torch.randn(2, 3, 5, 4) for _ in range(3))
    gm = make_fx(_three_heads, tracing_mode="symbolic")(*inputs)
    assert scatters_into_zeros_as_cats(gm) == 0
    assert call_targets(gm).count(aten.slice_scatter.default) == 3
