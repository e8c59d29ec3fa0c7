"""Stage 3: misaligned 16-bit matrix products are padded before lowering
(Note [Aligned matrix products] in mybackend/passes/matmul_padding.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.aot import _partition
from mybackend.options import Options
from mybackend.passes import matmul_padding
from mybackend.passes.matmul_padding import pad_matmuls

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


def test_a_graph_with_nothing_to_pad_is_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common case (every CPU graph, all of ResNet-50's) is one walk over the nodes."""
    gm, inputs = _traced(lambda x, w: (torch.mm(x, w.t()),), (8192, 768), (3072, 768))

    def no_copy(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("graph copied")

    monkeypatch.setattr(torch.fx.Graph, "graph_copy", no_copy)
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


def _joint_output_layer(
    primals_1: torch.Tensor, primals_2: torch.Tensor, tangents_1: torch.Tensor
) -> list[torch.Tensor]:
    """A joint graph as aot_autograd hands it to the partitioner: an output
    layer whose backward reads its logits, and both weight products."""
    weight_t = primals_2.t()
    logits = torch.mm(primals_1, weight_t)
    grad = (tangents_1 * 2 * logits.float()).to(BF16)
    # mm's gradient formula reads the weight as t(t(W)).
    return [logits.float().square(), torch.mm(grad, weight_t.t()), torch.mm(grad.t(), primals_1)]


@pytest.mark.parametrize("pad", [True, False])
def test_training_pads_on_the_joint_graph(pad: bool) -> None:
    """Padded before the split, the forward saves its padded product and
    padded weight for the backward: no copy back to the traced strides, and
    the backward pads only its own gradient."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [
            torch.empty(8192, 768, dtype=BF16, device="cuda"),
            torch.empty(50257, 768, dtype=BF16, device="cuda"),
            torch.empty(8192, 50257, device="cuda"),
        ]
    gm = make_fx(_joint_output_layer, tracing_mode="fake")(*inputs)
    forward, backward = _partition(
        gm, inputs, options=Options(pad_matmuls=pad, channels_last=False), num_fwd_outputs=1
    )
    assert len(_nodes(forward, aten.constant_pad_nd.default)) == int(pad)
    assert len(_nodes(backward, aten.constant_pad_nd.default)) == int(pad)
    assert not _nodes(forward, aten.clone.default)
    saved = [n.meta["val"] for n in backward.graph.find_nodes(op="placeholder")]
    padded_rows = [v for v in saved if v.shape[-1] == 50264 or v.shape[0] == 50264]
    assert len(padded_rows) == (2 if pad else 0), [tuple(v.shape) for v in saved]
    for product in _nodes(forward, aten.mm.default) + _nodes(backward, aten.mm.default):
        a, b = (arg.meta["val"] for arg in product.args)
        aligned = all(size % 8 == 0 for size in (*a.shape, *b.shape))
        assert aligned == pad, (tuple(a.shape), tuple(b.shape))
