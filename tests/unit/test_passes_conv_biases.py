"""Stage 3: grouped convolutions hand their bias to an add after them
(Note [Grouped convolution biases])."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mybackend.passes.conv_biases import peel_grouped_conv_biases
from tests.testing import fake_graph

aten = torch.ops.aten


def _ops(gm: torch.fx.GraphModule, target: object) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="call_function", target=target))


def _output(gm: torch.fx.GraphModule) -> torch.Tensor:
    (output,) = gm.graph.find_nodes(op="output")
    return output.args[0][0].meta["val"]


def _depthwise_block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    """ConvNeXt's: a depthwise 7x7 with a bias, then a LayerNorm over channels."""
    y = F.conv2d(x, w, b, padding=3, groups=x.shape[1]).permute(0, 2, 3, 1)
    return (F.layer_norm(y, (x.shape[1],)),)


def _returned(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    return (F.conv2d(x, w, b, padding=1, groups=2),)


@pytest.mark.parametrize(
    ("fn", "weight"), [(_depthwise_block, (8, 1, 7, 7)), (_returned, (8, 4, 3, 3))]
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_grouped_convolution_adds_its_bias_after_itself(
    fn: object, weight: tuple[int, ...], channels_last: bool
) -> None:
    shapes = [(2, 8, 9, 9), weight, (8,)]
    layout = torch.channels_last if channels_last else torch.contiguous_format

    def in_layout(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
        return fn(x.contiguous(memory_format=layout), w.contiguous(memory_format=layout), b)

    gm = fake_graph(in_layout, *shapes)
    (conv,) = _ops(gm, aten.convolution.default)
    before = conv.meta["val"]
    assert before.is_contiguous(memory_format=layout)
    traced_out = _output(gm)
    assert peel_grouped_conv_biases(gm) == 1
    (conv,) = _ops(gm, aten.convolution.default)
    assert conv.args[2] is None
    (add,) = _ops(gm, aten.add.Tensor)
    assert add.args[0] is conv
    # Same sizes and strides after the add as the biased convolution had.
    assert add.meta["val"].shape == before.shape and add.meta["val"].stride() == before.stride()
    assert _output(gm).stride() == traced_out.stride()
    # The rewritten graph computes the same values (run on the CPU).
    x, w, b = (torch.randn(s) for s in shapes)
    torch.testing.assert_close(gm(x, w, b)[0], in_layout(x, w, b)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("weight", "groups", "bias", "transposed"),
    [
        ((8, 8, 3, 3), 1, True, False),  # dense: cuDNN keeps its fused bias
        ((8, 4, 3, 3), 2, False, False),  # no bias to hand on
        ((8, 4, 3, 3), 2, True, True),  # transposed
    ],
)
def test_other_convolutions_keep_their_bias(
    weight: tuple[int, ...], groups: int, bias: bool, transposed: bool
) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
        if transposed:
            return (F.conv_transpose2d(x, w, b if bias else None, padding=1, groups=groups),)
        return (F.conv2d(x, w, b if bias else None, padding=1, groups=groups),)

    gm = fake_graph(fn, (2, 8, 9, 9), weight, (8,))
    assert peel_grouped_conv_biases(gm) == 0
    assert not _ops(gm, aten.add.Tensor)


def test_cpu_convolutions_keep_their_bias() -> None:
    gm = fake_graph(_returned, (2, 8, 9, 9), (8, 4, 3, 3), (8,), device="cpu")
    assert peel_grouped_conv_biases(gm) == 0
