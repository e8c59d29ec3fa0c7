"""Stage 3: elementwise ops moved past the shape view that follows them
(Note [Elementwise ops past their views])."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from mybackend import _C
from mybackend.lowering import lower
from mybackend.passes.softmax_views import softmaxes_before_views
from mybackend.passes.views_after_elementwise import move_elementwise_past_views
from tests.testing import fake_graph

aten = torch.ops.aten
B, W, H, N = 2, 4, 3, 5


def _shifted_windows(
    scores: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """Swin's shifted-window attention: the bias added on [B * W, H, N, N],
    the shift mask on the [B, W, H, N, N] view, the softmax on the view back."""
    s = (scores + bias).view(B, W, H, N, N) + mask
    return torch.softmax(s.view(B * W, H, N, N), -1) @ values


SHAPES = ((B * W, H, N, N), (1, H, N, N), (1, W, 1, N, N), (B * W, H, N, 2))


def test_the_bias_add_moves_past_the_view_into_the_softmax_kernel() -> None:
    gm = fake_graph(_shifted_windows, *SHAPES)
    assert softmaxes_before_views(gm) == 1
    assert move_elementwise_past_views(gm) == 1
    (softmax,) = gm.graph.find_nodes(op="call_function", target=aten._softmax.default)
    mask_add = softmax.args[0]
    assert mask_add.target is aten.add.Tensor
    bias_add = mask_add.args[0]
    assert bias_add.target is aten.add.Tensor and bias_add.meta["val"].shape == (B, W, H, N, N)
    bias = bias_add.args[1]
    assert bias.target is aten.view.default and bias.meta["val"].shape == (1, 1, H, N, N)
    # The same result (run here on the CPU).
    inputs = [torch.randn(s) for s in SHAPES]
    torch.testing.assert_close(gm(*inputs), _shifted_windows(*inputs))
    # One norm kernel computes both adds and the softmax; nothing stores a sum.
    lowered = lower(gm, [])
    options = {"generated_kernels": True}
    kernels = _C.compile(lowered.graph, options, lowered.run_python_node).report()["kernels"]
    (norm,) = [k for k in kernels if k["kind"] == "norm"]
    assert str(norm["spec"]).count("add") == 2, norm["spec"]
    assert not [k for k in kernels if k["kind"] == "pointwise"], kernels


def _read_twice(scores: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    s = scores + bias
    return torch.softmax(s.view(B, W, H, N, N) * 2, -1).sum() + s.sum()


def _split_over_a_dim_the_operand_has(scores: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    # other is [B * W, 1, N, N]: the view splits its first dim, so it would
    # need a copy to follow.
    return torch.softmax((scores + other).view(B, W, H, N, N) * 2, -1)


def test_ops_that_cannot_follow_the_view_stay() -> None:
    gm = fake_graph(_read_twice, SHAPES[0], SHAPES[1])
    assert move_elementwise_past_views(gm) == 0
    gm = fake_graph(_split_over_a_dim_the_operand_has, SHAPES[0], (B * W, 1, N, N))
    assert move_elementwise_past_views(gm) == 0


def test_a_chain_moves_op_by_op_and_cpu_graphs_stay() -> None:
    def chain(scores: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.softmax(((scores * 0.5 + bias).exp()).view(B, W, H, N, N) - 1, -1)

    gm = fake_graph(chain, SHAPES[0], SHAPES[1])
    assert move_elementwise_past_views(gm) == 3  # exp, add, mul
    for node in gm.graph.nodes:
        if node.target in (aten.mul.Tensor, aten.add.Tensor, aten.exp.default):
            assert node.meta["val"].shape == (B, W, H, N, N), node
    inputs = [torch.randn(SHAPES[0]), torch.randn(SHAPES[1])]
    torch.testing.assert_close(gm(*inputs), chain(*inputs))
    assert move_elementwise_past_views(fake_graph(chain, *SHAPES[:2], device="cpu")) == 0


def _random_case(rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """A shape, a view of it that splits or merges dims, and an operand
    shape broadcast over the first (some dims 1, maybe fewer dims)."""
    sizes = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(2, 4))]
    after: list[int] = []
    i = 0
    while i < len(sizes):
        if i + 1 < len(sizes) and rng.random() < 0.4:  # merge two dims
            after.append(sizes[i] * sizes[i + 1])
            i += 2
        elif sizes[i] in (4, 6) and rng.random() < 0.5:  # split one
            after += [2, sizes[i] // 2]
            i += 1
        else:
            after.append(sizes[i])
            i += 1
    if rng.random() < 0.3:
        after.append(1)
    operand = [s if rng.random() < 0.5 else 1 for s in sizes]
    operand = operand[rng.randint(0, len(operand) - 1) :]
    return sizes, after, operand


def _op_then_view(
    op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], after: list[int]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.softmax(op(x, y).view(after), -1)

    return fn


def test_random_views_move_past_elementwise_ops_without_changing_results() -> None:
    """Whatever the pass rewrites computes what the graph computed."""
    rng = random.Random(0)
    moved = 0
    for _ in range(200):
        sizes, after, operand = _random_case(rng)
        op = rng.choice([torch.add, torch.mul, torch.maximum])

        fn = _op_then_view(op, after)
        gm = fake_graph(fn, tuple(sizes), tuple(operand))
        moved += move_elementwise_past_views(gm)
        x, y = torch.randn(sizes), torch.randn(operand)
        torch.testing.assert_close(gm(x, y), fn(x, y))
    assert moved > 50, moved  # the cases exercise the rewrite, not only its refusals
