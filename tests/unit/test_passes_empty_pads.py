"""Stage 3: pads that add nothing are dropped (Note [Pads that add nothing])."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend
from mybackend.passes.empty_pads import drop_empty_pads

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
