"""Stage 3: a softmax computed before the shape view it was handed (Note
[Softmaxes before their views])."""

from __future__ import annotations

import pytest
import torch

from mybackend.passes.softmax_views import softmaxes_before_views
from tests.testing import fake_graph

aten = torch.ops.aten
B, H, T, S = 2, 3, 4, 5


def _masked_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """BART's eager attention: the mask added on [B, H, T, S], the softmax on
    the [B * H, T, S] view, then a product with the values."""
    weights = scores.view(B, H, T, S) + mask
    probs = torch.softmax(weights.view(B * H, T, S), dim=-1)
    return probs @ torch.ones(S, 2, device=scores.device)


def _softmax_reader(gm: torch.fx.GraphModule) -> torch.fx.Node:
    (softmax,) = gm.graph.find_nodes(op="call_function", target=aten._softmax.default)
    return softmax


@pytest.mark.parametrize("log", [False, True])
def test_the_softmax_reads_the_sum_and_its_result_is_viewed(log: bool) -> None:
    def fn(scores: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        weights = (scores.view(B, H, T, S) + mask).view(B * H, T, S)
        probs = torch.log_softmax(weights, -1) if log else torch.softmax(weights, -1)
        return probs @ values

    gm = fake_graph(fn, (B * H, T, S), (B, 1, 1, S), (B * H, S, 2))
    target = aten._log_softmax.default if log else aten._softmax.default
    (before,) = gm.graph.find_nodes(op="call_function", target=target)
    assert before.args[0].target in (aten.view.default, aten._unsafe_view.default)
    assert softmaxes_before_views(gm) == 1
    (after,) = gm.graph.find_nodes(op="call_function", target=target)
    assert after.args[0].target is aten.add.Tensor, "the softmax reads the masked sum"
    assert after.meta["val"].shape == (B, H, T, S)
    (reader,) = after.users
    assert reader.target is aten.view.default and reader.meta["val"].shape == (B * H, T, S)
    # The rewritten graph computes the same result (run here on the CPU).
    inputs = torch.randn(B * H, T, S), torch.randn(B, 1, 1, S), torch.randn(B * H, S, 2)
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


def _returned_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax((scores.view(B, H, T, S) + mask).view(B * H, T, S), -1)


def _softmax_over_a_merged_last_dim(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = (scores.view(B, H, T, S) + mask).view(B, H, T * S)
    return torch.softmax(weights, -1) @ torch.ones(T * S, 2, device=scores.device)


def _softmax_over_another_dim(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = (scores.view(B, H, T, S) + mask).view(B * H, T, S)
    return torch.softmax(weights, 1).sum()


def test_softmaxes_the_rewrite_would_change_stay() -> None:
    """A returned softmax (training saves it), a view that merges the last
    dim, and a softmax over another dim."""
    for fn in (_returned_softmax, _softmax_over_a_merged_last_dim, _softmax_over_another_dim):
        gm = fake_graph(fn, (B * H, T, S), (B, 1, 1, S))
        assert softmaxes_before_views(gm) == 0, fn.__name__


def test_cpu_graphs_are_left_as_they_are() -> None:
    gm = fake_graph(_masked_scores, (B * H, T, S), (B, 1, 1, S), device="cpu")
    assert softmaxes_before_views(gm) == 0
    assert _softmax_reader(gm).args[0].target in (aten.view.default, aten._unsafe_view.default)


def test_the_mask_add_joins_the_softmax_kernel() -> None:
    """After the rewrite the fusion planner takes the add as the softmax's
    prologue (Note [Softmax prologues with broadcast inputs]): one norm
    kernel reads the scores and the mask, and no kernel stores their sum."""
    from mybackend import _C
    from mybackend.lowering import lower

    def kernels(rewrite: bool) -> list[dict[str, object]]:
        gm = fake_graph(_masked_scores, (B * H, T, S), (B, 1, 1, S))
        if rewrite:
            assert softmaxes_before_views(gm) == 1
        lowered = lower(gm, [])
        options = {"generated_kernels": True}
        return list(_C.compile(lowered.graph, options, lowered.run_python_node).report()["kernels"])

    before = kernels(False)
    norms = [k for k in before if k["kind"] == "norm"]
    assert len(norms) == 1 and "prologue:" not in str(norms[0]["spec"]), before
    after = kernels(True)
    norms = [k for k in after if k["kind"] == "norm"]
    assert len(norms) == 1 and "prologue:" in str(norms[0]["spec"]), after
    assert "strided" in str(norms[0]["spec"]), norms[0]["spec"]
    assert not [k for k in after if k["kind"] == "pointwise"], after
