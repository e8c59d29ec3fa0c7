"""Stage 3: convolutions over non-overlapping patches become one matrix
product (Note [Patch convolutions as products])."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from mybackend.passes.patch_convolutions import patch_convolutions_as_products
from tests.testing import fake_graph

aten = torch.ops.aten


def _patch_embedding(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    """ViT's: patches, then [N, patches, channels] tokens, normalized."""
    tokens = F.conv2d(x, w, b, stride=4).flatten(2).transpose(1, 2)
    return (F.layer_norm(tokens * 2.0, (w.shape[0],)),)


def _channels_last_tokens(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    """Swin's and ConvNeXt's: patches, then [N, H, W, C] for a LayerNorm."""
    y = F.conv2d(x, w, b, stride=4).permute(0, 2, 3, 1)
    return (F.layer_norm(y, (w.shape[0],)),)


def _returned(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    """The convolution is the graph's output (in a tuple, as aot_autograd's
    graphs return): its strides come back."""
    return (F.conv2d(x, w, b, stride=4),)


def _output(gm: torch.fx.GraphModule) -> torch.Tensor:
    (output,) = gm.graph.find_nodes(op="output")
    value = output.args[0]
    node = value[0] if isinstance(value, list | tuple) else value
    return node.meta["val"]


def _ops(gm: torch.fx.GraphModule, target: object) -> int:
    return len(gm.graph.find_nodes(op="call_function", target=target))


@pytest.mark.parametrize("fn", [_patch_embedding, _channels_last_tokens, _returned])
def test_a_patch_convolution_is_a_product_with_the_same_values(
    fn: Callable[..., torch.Tensor],
) -> None:
    shapes = [(2, 3, 8, 12), (16, 3, 4, 4), (16,)]
    gm = fake_graph(fn, *shapes)
    traced_out = _output(gm)
    rewritten, count = patch_convolutions_as_products(gm)
    assert count == 1
    assert _ops(rewritten, aten.convolution.default) == 0
    assert _ops(rewritten, aten.addmm.default) == 1
    out = _output(rewritten)
    assert out.shape == traced_out.shape and out.stride() == traced_out.stride()
    # The rewritten graph computes the convolution's values (run on the CPU).
    x, w, b = (torch.randn(s) for s in shapes)
    torch.testing.assert_close(rewritten(x, w, b)[0], fn(x, w, b)[0], rtol=1e-4, atol=1e-4)


def test_the_tokens_read_the_product_without_a_copy_after_it() -> None:
    """The product's rows are the tokens: only the patch copy moves data;
    a returned convolution gets one copy back into its strides."""
    for fn, copies in ((_patch_embedding, 1), (_channels_last_tokens, 1), (_returned, 2)):
        gm = fake_graph(fn, (2, 3, 8, 12), (16, 3, 4, 4), (16,))
        rewritten, _ = patch_convolutions_as_products(gm)
        assert _ops(rewritten, aten.clone.default) == copies, fn.__name__


def test_a_graph_whose_outputs_cannot_get_their_strides_back_is_left_alone() -> None:
    def tokens(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (F.conv2d(x, w, None, stride=4).flatten(2).transpose(1, 2),)  # not contiguous

    gm = fake_graph(tokens, (2, 3, 8, 12), (16, 3, 4, 4))
    rewritten, count = patch_convolutions_as_products(gm)
    assert (rewritten, count) == (gm, 0)


@pytest.mark.parametrize(
    ("weight", "stride", "padding", "groups", "channels", "size"),
    [
        ((16, 3, 4, 4), 2, 0, 1, 3, 8),  # overlapping patches
        ((16, 3, 4, 4), 4, 1, 1, 3, 8),  # padded
        ((18, 1, 4, 4), 4, 0, 3, 3, 8),  # grouped
        ((16, 16, 2, 2), 2, 0, 1, 16, 8),  # deep in a network: cuDNN's
        ((16, 3, 4, 4), 4, 0, 1, 3, 10),  # the size is not a multiple of the patch
        ((16, 3, 1, 1), 1, 0, 1, 3, 8),  # a 1x1 convolution
    ],
)
def test_other_convolutions_stay(
    weight: tuple[int, ...], stride: int, padding: int, groups: int, channels: int, size: int
) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (F.conv2d(x, w, None, stride=stride, padding=padding, groups=groups),)

    gm = fake_graph(fn, (2, channels, size, size), weight)
    assert patch_convolutions_as_products(gm)[1] == 0


def test_cpu_convolutions_stay() -> None:
    gm = fake_graph(_returned, (2, 3, 8, 8), (16, 3, 4, 4), (16,), device="cpu")
    assert patch_convolutions_as_products(gm)[1] == 0
