"""Stage 3: copies that compute nothing are dropped (Note [Pads that add
nothing], Note [Clones that keep their layout])."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend
from mybackend.passes.noop_copies import drop_empty_pads, drop_identity_copies

aten = torch.ops.aten


def _pads_left(fn: Callable[..., object], *args: torch.Tensor) -> tuple[int, int]:
    """(pads dropped, pads left) of ``fn``'s traced graph."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    dropped = drop_empty_pads(gm)
    left = len(gm.graph.find_nodes(op="call_function", target=aten.constant_pad_nd.default))
    return dropped, left


def test_a_pad_by_zero_hands_its_readers_the_input() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, 0, 0, 0, 0, 0)) * 2.0

    assert _pads_left(fn, torch.randn(2, 4, 4, 3)) == (1, 0)


def test_pads_that_add_something_or_must_stay_a_copy_stay() -> None:
    def nonzero(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, 1)) * 2.0

    def returned(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        padded = F.pad(x, (0, 0))
        return padded.view(-1), x * 2.0

    def strided(x: torch.Tensor) -> torch.Tensor:  # the copy comes out contiguous
        return F.pad(x[:, ::2], (0, 0)) * 2.0

    def written(x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, (0, 0))
        x.copy_(x * 3.0)
        return padded * 2.0

    x = torch.randn(4, 6)
    assert _pads_left(nonzero, x) == (0, 1)
    assert _pads_left(returned, x) == (0, 1)
    assert _pads_left(strided, x) == (0, 1)
    assert _pads_left(written, x) == (0, 1)


class WindowPad(torch.nn.Module):
    """Swin's window attention pads to a multiple of the window, by 0 here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        window = 2
        _, h, w, _ = x.shape
        x = F.pad(x, (0, 0, 0, (window - w % window) % window, 0, (window - h % window) % window))
        return x.relu() + 1.0


def test_through_the_backend_the_result_is_eagers() -> None:
    module = WindowPad()
    x = torch.randn(2, 4, 6, 3)
    torch._dynamo.reset()
    with torch.no_grad():
        report = mybackend.explain(module, x, options={"strict": True})
        compiled = torch.compile(module, backend="mybackend", options={"strict": True})
        torch.testing.assert_close(compiled(x), module(x))
        odd = torch.randn(2, 5, 5, 3)  # padded by 1: the pad stays
        torch.testing.assert_close(compiled(odd), module(odd))
    stages = [s[0] for g in report.to_dict()["graphs"] for s in g["stage_times"]]
    assert "empty_pads" in stages


def _identities_left(fn: Callable[..., object], *args: torch.Tensor) -> tuple[int, int]:
    """(clones and expands dropped, clones and expands left) of ``fn``'s graph."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    dropped = drop_identity_copies(gm)
    left = sum(
        len(gm.graph.find_nodes(op="call_function", target=t))
        for t in (aten.clone.default, aten.expand.default)
    )
    return dropped, left


def test_an_inference_dropout_and_a_same_size_expand_hand_over_their_input() -> None:
    def dropout(x: torch.Tensor) -> torch.Tensor:  # aot_autograd's inference dropout
        return x.softmax(-1).clone() * 2.0

    def same_size_matmul(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.matmul(q * 0.5, k.transpose(-2, -1))

    assert _identities_left(dropout, torch.randn(2, 3, 8)) == (1, 0)
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    dropped, _ = _identities_left(same_size_matmul, q, k)
    assert dropped >= 1


def test_clones_that_move_elements_or_must_stay_a_copy_stay() -> None:
    def permuted(x: torch.Tensor) -> torch.Tensor:  # a contiguous copy of a transpose
        return x.t().clone(memory_format=torch.contiguous_format) * 2.0

    def returned(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2.0
        return y.clone().view(-1), y

    def written(x: torch.Tensor) -> torch.Tensor:
        kept = x.clone()
        x.copy_(x * 3.0)
        return kept * 2.0

    def broadcast(x: torch.Tensor) -> torch.Tensor:
        return x.expand(3, 4, 6) * 2.0

    x = torch.randn(4, 6)
    assert _identities_left(permuted, x) == (0, 1)
    assert _identities_left(returned, x) == (0, 1)
    assert _identities_left(written, x) == (0, 1)
    assert _identities_left(broadcast, x) == (0, 1)


class ScaledDotAttention(torch.nn.Module):
    """Attention written out as Swin's is: scaled query, matmul, softmax,
    dropout (an inference clone), matmul."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q * 0.25, k.transpose(-2, -1)).softmax(-1)
        return torch.matmul(F.dropout(scores, p=0.1, training=self.training), v)


def test_attention_without_its_copies_matches_eager() -> None:
    module = ScaledDotAttention().eval()
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    torch._dynamo.reset()

    def lowered_ops(options: dict[str, object]) -> list[str]:
        (graph,) = mybackend.explain(module, q, k, v, options=options).to_dict()["graphs"]
        return [node["op"] for node in graph["report"]["nodes"]]

    with torch.no_grad():
        kept = lowered_ops({"strict": True, "disabled_passes": ("identity_copies",)})
        dropped = lowered_ops({"strict": True})
        compiled = torch.compile(module, backend="mybackend", options={"strict": True})
        torch.testing.assert_close(compiled(q, k, v), module(q, k, v))
    assert kept.count("aten::clone.default") == 1  # the dropout's
    assert kept.count("aten::expand.default") == 4  # each matmul operand's, none broadcast
    assert "aten::clone.default" not in dropped and "aten::expand.default" not in dropped


def test_a_clone_of_an_input_written_by_a_batched_epilogue_stays() -> None:
    """Note [Batched input mutations] turns the epilogue's copy_ nodes into one
    _foreach_copy_ before these passes run: that write counts too."""
    from mybackend.passes.mutations import batch_input_mutations

    def two_writes(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        kept = x.clone()
        x.copy_(x * 3.0)
        y.copy_(y * 3.0)
        return kept * 2.0

    gm = make_fx(two_writes, tracing_mode="fake")(torch.randn(4, 6), torch.randn(4, 6))
    assert batch_input_mutations(gm) == 2
    assert gm.graph.find_nodes(op="call_function", target=aten._foreach_copy_.default)
    assert drop_identity_copies(gm) == 0
    assert len(gm.graph.find_nodes(op="call_function", target=aten.clone.default)) == 1
