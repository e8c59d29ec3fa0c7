"""Stage 3: misaligned 16-bit matrix products are padded before lowering
(Note [Aligned matrix products] in mybackend/lowering/matmul_padding.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.lowering import matmul_padding
from mybackend.lowering.matmul_padding import pad_matmuls

aten = torch.ops.aten
BF16 = torch.bfloat16


def _traced(
    fn: Callable[..., Any],
    *shapes: tuple[int, ...],
    dtype: torch.dtype = BF16,
    device: str = "cuda",
) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(s, dtype=dtype, device=device) for s in shapes]
    return make_fx(fn, tracing_mode="fake")(*inputs), inputs


def _nodes(gm: torch.fx.GraphModule, target: Any) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is target]


def _output_values(gm: torch.fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [a.meta["val"] for a in output.args[0]]


def test_an_output_layer_pads_the_weight_and_keeps_padded_strides_in_inference() -> None:
    """GPT-2's logits: [8192, 768] @ t([50257, 768]); the 50257-wide rows are
    misaligned, the weight gains 7 zero rows and the output is sliced."""
    gm, inputs = _traced(lambda x, w: (torch.mm(x, w.t()),), (8192, 768), (50257, 768))
    padded, count = pad_matmuls(gm, inputs, "inference")
    assert count == 1
    [pad] = _nodes(padded, aten.constant_pad_nd.default)
    assert tuple(pad.meta["val"].shape) == (50264, 768)
    [product] = _nodes(padded, aten.mm.default)
    assert tuple(product.meta["val"].shape) == (8192, 50264)
    [logits] = _output_values(padded)
    assert tuple(logits.shape) == (8192, 50257) and logits.stride() == (50264, 1)


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_training_graphs_return_their_traced_strides(kind: str) -> None:
    gm, inputs = _traced(lambda x, w: (torch.mm(x, w.t()),), (8192, 768), (50257, 768))
    padded, count = pad_matmuls(gm, inputs, kind)
    assert count == 1
    [logits] = _output_values(padded)
    assert logits.is_contiguous()


def test_a_backward_pair_shares_the_padded_gradient() -> None:
    """dX = g @ W pads K on both sides; dW = gᵀ @ X pads M of gᵀ: the padded
    g serves both, so there are two pad copies (g and W), not three."""

    def backward(g: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> Any:
        return torch.mm(g, w), torch.mm(g.t(), x)

    gm, inputs = _traced(backward, (8192, 50257), (50257, 768), (8192, 768))
    padded, count = pad_matmuls(gm, inputs, "inference")
    assert count == 2
    pads = sorted(tuple(n.meta["val"].shape) for n in _nodes(padded, aten.constant_pad_nd.default))
    assert pads == [(8192, 50264), (50264, 768)]
    grad_x, grad_w = _output_values(padded)
    assert tuple(grad_x.shape) == (8192, 768)
    assert tuple(grad_w.shape) == (50257, 768)


def test_a_linear_layer_pads_its_bias_with_the_weight() -> None:
    gm, inputs = _traced(
        lambda b, x, w: (torch.addmm(b, x, w.t()),), (50257,), (4096, 768), (50257, 768)
    )
    padded, count = pad_matmuls(gm, inputs, "inference")
    assert count == 1
    [product] = _nodes(padded, aten.addmm.default)
    bias = product.args[0]
    assert isinstance(bias, torch.fx.Node) and tuple(bias.meta["val"].shape) == (50264,)


@pytest.mark.parametrize(
    ("shapes", "dtype", "device"),
    [
        (((8192, 768), (3072, 768)), BF16, "cuda"),  # aligned already
        (((8192, 768), (50257, 768)), torch.float32, "cuda"),  # not a 16-bit product
        (((8192, 768), (50257, 768)), BF16, "cpu"),  # not a CUDA product
        (((16, 768), (50257, 768)), BF16, "cuda"),  # the copy would cost more than it saves
    ],
)
def test_products_that_gain_nothing_are_left_alone(
    shapes: tuple[tuple[int, ...], ...], dtype: torch.dtype, device: str
) -> None:
    gm, inputs = _traced(lambda x, w: (torch.mm(x, w.t()),), *shapes, dtype=dtype, device=device)
    padded, count = pad_matmuls(gm, inputs, "inference")
    assert count == 0 and padded is gm


def test_a_product_read_through_as_strided_is_left_alone() -> None:
    """as_strided addresses storage with the traced strides: padding would shift it."""
    gm, inputs = _traced(
        lambda x, w: (torch.mm(x, w.t()).as_strided((4, 4), (50257, 1)),),
        (8192, 768),
        (50257, 768),
    )
    padded, count = pad_matmuls(gm, inputs, "inference")
    assert count == 0 and padded is gm


def test_padded_graph_computes_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU, with the cost test switched off: small odd sizes, every pad."""
    monkeypatch.setattr(matmul_padding, "_MAX_COPY_TO_PRODUCT", float("inf"))

    def fn(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> Any:
        logits = torch.addmm(b, x, w.t())  # N = 101
        grad_x = torch.mm(g, w)  # K = 101
        grad_w = torch.mm(g.t(), x)  # M = 101, transposed
        return logits.view(4, 16, 101).sum(-1), grad_x, grad_w

    shapes = ((64, 40), (101, 40), (64, 101), (101,))
    gm, fake_inputs = _traced(fn, *shapes, device="cpu")
    padded, count = pad_matmuls(gm, fake_inputs, "forward", device_types=("cpu",))
    assert count == 3
    gen = torch.Generator().manual_seed(0)
    real = [torch.randn(s, generator=gen).to(BF16) for s in shapes]
    for got, want in zip(padded(*real), gm(*real), strict=True):
        torch.testing.assert_close(got, want)
