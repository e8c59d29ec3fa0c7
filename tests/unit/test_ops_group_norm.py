"""Group norm as a statistics kernel and elementwise ops (Note [Group-norm
statistics] in mybackend/ops/group_norm.py): the rewrite, its ATen
implementation against eager's group norm, and the CUDA plan (a generated
statistics kernel in either layout, the normalization fused with the SiLU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import mybackend.ops.batch_norm as batch_norm
from tests.testing import training_steps_match_eager
from tests.unit.test_matmul_plan import _aot_graphs, _kernels

STATS = torch.ops.mybackend.group_norm_stats.default
BF16 = torch.bfloat16


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Apply the rewrite to CPU tensors, so that its whole path runs here."""
    monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu", "cuda"))
    yield


def _block(groups: int = 4, channels: int = 16, affine: bool = True) -> nn.Module:
    torch.manual_seed(0)
    block = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1),
        nn.GroupNorm(groups, channels, affine=affine),
        nn.SiLU(),
    )
    if affine:
        with torch.no_grad():
            block[1].weight.uniform_(0.5, 1.5)
            block[1].bias.uniform_(-0.5, 0.5)
    return block


def _targets(gm: torch.fx.GraphModule) -> set[object]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def test_group_norm_becomes_statistics_and_elementwise_ops(on_cpu: None) -> None:
    graphs = _aot_graphs(_block(), torch.randn(2, 3, 8, 8, requires_grad=True))
    forward = _targets(graphs["forward"])
    assert STATS in forward
    assert torch.ops.aten.native_group_norm.default not in forward


def test_the_cpu_keeps_atens_group_norm() -> None:
    """Note [Eager's kernels on the CPU]: without the widened devices, a CPU
    graph keeps the op whole."""
    with torch.no_grad():
        graph = _aot_graphs(_block(), torch.randn(2, 3, 8, 8))["inference"]
    targets = _targets(graph)
    assert torch.ops.aten.native_group_norm.default in targets and STATS not in targets


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_stats_matches_atens_statistics(layout: str, dtype: torch.dtype) -> None:
    x = (torch.randn(3, 12, 5, 7) * 4 + 2).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    mean, rstd, channel_mean, channel_rstd = STATS(x, 3, 1e-3)
    _, want_mean, want_rstd = torch.native_group_norm(x, None, None, 3, 12, 35, 3, 1e-3)
    assert mean.dtype == rstd.dtype == dtype and mean.shape == (3, 3)
    torch.testing.assert_close(mean, want_mean)
    torch.testing.assert_close(rstd, want_rstd)
    assert channel_mean.dtype == channel_rstd.dtype == torch.float32
    assert channel_mean.shape == (3, 12)
    torch.testing.assert_close(channel_mean.to(dtype), want_mean.repeat_interleave(4, 1))
    torch.testing.assert_close(channel_rstd.to(dtype), want_rstd.repeat_interleave(4, 1))


@pytest.mark.parametrize("shape", [(2, 16, 6, 5), (3, 16, 10), (2, 16, 3, 4, 2)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_compiled_training_matches_eager(
    on_cpu: None, shape: tuple[int, ...], affine: bool
) -> None:
    """Output, input and parameter gradients over two steps, through the ATen
    implementation of the statistics and core ATen's backward."""
    torch.manual_seed(1)
    eager = nn.Sequential(nn.GroupNorm(4, 16, affine=affine), nn.SiLU())
    if affine:
        with torch.no_grad():
            eager[0].weight.uniform_(0.5, 1.5)
            eager[0].bias.uniform_(-0.5, 0.5)
    training_steps_match_eager(eager, shape)


@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_plan_generates_the_statistics_and_fuses_the_normalization_with_silu(
    on_cpu: None, channels_last: bool
) -> None:
    """On (fake) CUDA tensors the statistics are a generated norm group in
    either layout, and the normalization and SiLU one generated pointwise
    kernel: no group-norm op is left to ATen."""
    block = _block()
    x = torch.randn(2, 3, 8, 8)
    if channels_last:
        block, x = (
            block.to(memory_format=torch.channels_last),
            x.to(memory_format=torch.channels_last),
        )
    with torch.no_grad():
        graph = _aot_graphs(block, x)["inference"]
    kernels, ops = _kernels(graph, generated_kernels=True)
    (norm,) = [k for k in kernels if k["kind"] == "norm"]
    assert ops[norm["nodes"][0]] == "mybackend::group_norm_stats.default"
    assert "group_norm_stats" in norm["spec"], norm
    silu = [  # core ATen's SiLU: x * sigmoid(x)
        k
        for k in kernels
        if k["kind"] == "pointwise" and "aten::sigmoid.default" in [ops[n] for n in k["nodes"]]
    ]
    assert len(silu) == 1, kernels
    assert {"aten::sub.Tensor", "aten::mul.Tensor", "aten::add.Tensor"} <= {
        ops[n] for n in silu[0]["nodes"]
    }
    leftover = [
        ops[n]
        for k in kernels
        if k["kind"] == "aten_sequence"
        for n in k["nodes"]
        if "group_norm" in ops[n]
    ]
    assert leftover == [], leftover


def test_an_empty_batch_gives_empty_statistics() -> None:
    mean, rstd, channel_mean, channel_rstd = STATS(torch.randn(0, 8, 3, 3), 4, 1e-5)
    assert mean.shape == rstd.shape == (0, 4)
    assert channel_mean.shape == channel_rstd.shape == (0, 8)


def test_channels_that_do_not_split_into_the_groups_keep_atens_error(on_cpu: None) -> None:
    """The rewrite declines, so the user sees ATen's message naming the
    problem, not a shape error of the rewrite."""
    compiled = torch.compile(
        lambda x: torch.nn.functional.group_norm(x, 3),
        backend="mybackend",
        options={"strict": True},
    )
    with pytest.raises(Exception, match="divisible by num_groups"):
        compiled(torch.randn(2, 8, 4, 4))
