"""Stage 7: the pool planner (Note [Pool groups]) on ATen graphs of real modules.

Graphs come from aot_autograd on small CPU tensors and are retraced with fake
CUDA tensors (the helpers of test_matmul_plan), so the planner sees CUDA
partitions; compiling runs NVRTC, which needs no GPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mybackend.decompositions import batch_norm_inference
from tests.unit.test_matmul_plan import _aot_graphs, _inference, _kernels, _on_fake_cuda

BF16 = torch.bfloat16


def _stem() -> nn.Module:
    """ResNet's stem: conv 7x7/2, batch norm, ReLU, max pool 3x3/2."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


def _pools(gm: torch.fx.GraphModule, **options: Any) -> tuple[list[dict[str, Any]], list[str]]:
    kernels, ops = _kernels(gm, generated_kernels=True, **options)
    for k in kernels:
        k["ops"] = [ops[n] for n in k["nodes"]]
    return [k for k in kernels if k["kind"] == "pool"], ops


def test_inference_stem_pools_with_its_batch_norm_relu_prologue() -> None:
    stem = _stem().to(BF16).eval()
    (pool,), ops = _pools(_inference(stem, torch.randn(2, 3, 32, 32, dtype=BF16)))
    assert pool["ops"][-1] == "aten::max_pool2d_with_indices.default", pool["ops"]
    assert "aten::relu.default" in pool["ops"] and "aten::mul.Tensor" in pool["ops"], pool["ops"]
    assert "indices not stored (nothing reads them)" in pool["why"], pool["why"]
    assert "indices=0" in pool["spec"] and "reads=window,channel,channel" in pool["spec"]
    assert pool["compiled"] is True, pool
    assert pool["kernel"].startswith("pool: mb_pool_"), pool["kernel"]
    assert "mb::max_pool2d<" in pool["source"]
    # The convolution is a cuDNN group; no elementwise kernel writes the
    # activation the pool reads.
    kernels, _ = _kernels(
        _inference(stem, torch.randn(2, 3, 32, 32, dtype=BF16)), generated_kernels=True
    )
    assert "conv" in [k["kind"] for k in kernels]
    relu = ops.index("aten::relu.default")
    (owner,) = [k for k in kernels if relu in k["nodes"]]
    assert owner["kind"] == "pool", owner


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_the_pool_walks_its_input_layout(layout: str) -> None:
    """The stem after its convolution, on a conv output of either layout
    (fake CUDA convolutions without a GPU give NCHW, so x stands in)."""

    def bn_relu_pool(x: torch.Tensor, *stats: torch.Tensor) -> torch.Tensor:
        y = batch_norm_inference(x, *stats, 0.1, 1e-5)[0]
        return F.max_pool2d(torch.relu(y), 3, 2, 1)

    x = torch.randn(2, 64, 16, 16, dtype=BF16)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    stats = [torch.randn(64, dtype=BF16) for _ in range(4)]
    (pool,), _ = _pools(_on_fake_cuda(bn_relu_pool, x, *stats))
    assert pool["why"].startswith(f"max_pool2d ({layout}) with 7 prologue"), pool["why"]
    vector = 8 if layout == "nhwc" else 1
    assert pool["spec"].startswith(
        f"max_pool2d layout={layout} dtype=bf16 vector={vector} indices=0 index=i32"
    ), pool["spec"]
    assert "reads=window,channel,channel" in pool["spec"], pool["spec"]
    assert pool["compiled"] is True, pool


def test_training_stores_indices_and_the_backward_is_a_generated_gather() -> None:
    stem = _stem()
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    graphs = _aot_graphs(stem, x)
    (pool,), _ = _pools(graphs["forward"])
    assert "indices stored" in pool["why"] and "indices=1" in pool["spec"], pool
    # ReLU's result is saved for its backward: stored by its own kernel, read as is.
    assert pool["ops"] == ["aten::max_pool2d_with_indices.default"], pool["ops"]
    (backward,), _ = _pools(graphs["backward"])
    assert backward["ops"] == ["aten::max_pool2d_with_indices_backward.default"], backward
    assert backward["why"].startswith("max_pool2d_backward (nchw) with 0 prologue"), backward
    assert backward["spec"].startswith("max_pool2d_backward layout=nchw dtype=f32"), backward
    assert backward["compiled"] is True, backward
    assert "mb::max_pool2d_backward<false, 1, I>(load, indices, store, shape)" in backward["source"]


def test_the_backward_takes_the_gradient_sum_as_its_prologue() -> None:
    """ResNet-50's stem pool: the gradient at the pooled values is the sum of
    layer 1's two branches; one kernel adds them and gathers the windows."""

    def backward(
        a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, indices: torch.Tensor
    ) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(
            a + b, x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices
        )

    cl = torch.channels_last
    x = torch.randn(2, 64, 16, 16, dtype=BF16).contiguous(memory_format=cl)
    values, indices = F.max_pool2d_with_indices(x.float(), 3, 2, 1)
    a = torch.randn(values.shape, dtype=BF16).contiguous(memory_format=cl)
    (pool,), _ = _pools(
        _on_fake_cuda(backward, a, a.clone(), x, indices.contiguous(memory_format=cl))
    )
    assert pool["ops"] == [
        "aten::add.Tensor",
        "aten::max_pool2d_with_indices_backward.default",
    ], pool["ops"]
    assert pool["why"].startswith("max_pool2d_backward (nhwc) with 1 prologue"), pool["why"]
    assert pool["spec"].startswith("max_pool2d_backward layout=nhwc dtype=bf16 vector=8"), pool
    assert "reads=window,window" in pool["spec"], pool["spec"]
    assert pool["compiled"] is True, pool
    # Indices in another layout than the gradient: the backward stays ATen.
    nchw_indices = indices.contiguous()
    assert not nchw_indices.is_contiguous(memory_format=cl)
    pools, _ = _pools(_on_fake_cuda(backward, a, a.clone(), x, nchw_indices))
    assert pools == [], pools


def test_unbatched_pools_and_disabled_engines_stay_aten() -> None:
    pool = nn.MaxPool2d(2)
    (kernel,), _ = _kernels(_inference(pool, torch.randn(4, 8, 8)), generated_kernels=True)
    assert kernel["kind"] == "aten_sequence"
    assert "a 3-d (unbatched) input stays an ATen call" in kernel["why"], kernel["why"]
    gm = _inference(pool, torch.randn(1, 4, 8, 8))
    assert [k["kind"] for k in _kernels(gm, generated_kernels=True)[0]] == ["pool"]
    assert [k["kind"] for k in _kernels(gm, generated_kernels=False)[0]] == ["aten_sequence"]
    disabled = _kernels(gm, generated_kernels=True, disabled_op_classes=["reduction"])[0]
    assert "pool" not in [k["kind"] for k in disabled]
