"""Stage 3: a product's transposed operand copied untransposed (Note
[Transposed operands copied untransposed])."""

from __future__ import annotations

import torch

from mybackend.passes.transposed_operands import copy_transposed_operands
from tests.testing import fake_graph

aten = torch.ops.aten
HEADS, HEAD_DIM = 3, 8


def _scores(qkv: torch.Tensor) -> torch.Tensor:
    """Attention scores of heads split out of one projection, as Swin does."""
    b, n, _ = qkv.shape
    q, k, _v = qkv.reshape(b, n, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4).unbind(0)
    return q @ k.transpose(-2, -1)


def _copies(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """The values the graph's clones read."""
    return [
        n.args[0].meta["val"]
        for n in gm.graph.find_nodes(op="call_function", target=aten.clone.default)
    ]


def test_the_key_transpose_is_copied_with_its_innermost_dim_kept() -> None:
    gm = fake_graph(_scores, (2, 5, 3 * HEADS * HEAD_DIM))
    transposing = [v for v in _copies(gm) if v.stride(-1) != 1]
    assert len(transposing) == 1, "aot's graph copies k^T contiguous"
    assert copy_transposed_operands(gm) == 1
    assert all(v.stride(-1) == 1 for v in _copies(gm))
    bmm = next(iter(gm.graph.find_nodes(op="call_function", target=aten.bmm.default)))
    operand = bmm.args[1].meta["val"]
    assert operand.shape == (2 * HEADS, HEAD_DIM, 5) and operand.stride()[-2:] == (1, HEAD_DIM)
    # The rewritten graph computes the same scores (run here on the CPU).
    qkv = torch.randn(2, 5, 3 * HEADS * HEAD_DIM)
    torch.testing.assert_close(gm(qkv), _scores(qkv))


def _returned_copy(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k = qkv.view(2, 5, HEADS, HEAD_DIM).permute(0, 2, 3, 1)  # [B, H, D, N], D strided
    copy = k.contiguous()
    return copy, copy.view(2 * HEADS, HEAD_DIM, 5) @ torch.ones(5, 4, device=qkv.device)


def _copy_read_twice(qkv: torch.Tensor) -> torch.Tensor:
    copy = qkv.view(2, 5, HEADS, HEAD_DIM).permute(0, 2, 3, 1).contiguous()
    return copy.view(2 * HEADS, HEAD_DIM, 5) @ torch.ones(5, 4, device=qkv.device) + copy.sum()


def _view_merging_the_last_dims(qkv: torch.Tensor) -> torch.Tensor:
    copy = qkv.view(2, 5, HEADS, HEAD_DIM).permute(0, 2, 3, 1).contiguous()
    return copy.view(2 * HEADS, HEAD_DIM * 5) @ torch.ones(HEAD_DIM * 5, 4, device=qkv.device)


def test_copies_the_product_does_not_read_alone_stay() -> None:
    for fn in (_returned_copy, _copy_read_twice, _view_merging_the_last_dims):
        gm = fake_graph(fn, (2, 5, HEADS * HEAD_DIM))
        assert copy_transposed_operands(gm) == 0, fn.__name__


def test_cpu_graphs_are_left_as_they_are() -> None:
    gm = fake_graph(_scores, (2, 5, 3 * HEADS * HEAD_DIM), device="cpu")
    assert any(v.stride(-1) != 1 for v in _copies(gm)), "a transposing copy to leave"
    assert copy_transposed_operands(gm) == 0
