"""Training batch norm as per-channel reductions and elementwise ops (Note
[Training batch norm] in mybackend/ops/batch_norm.py): the rewrite, its ATen
implementations against eager's batch norm, and the CUDA plan (generated
reductions, the normalization fused with the ReLU)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mybackend.ops.batch_norm as batch_norm
from tests.testing import training_steps_match_eager
from tests.unit.test_matmul_plan import _aot_graphs, _kernels

STATS = torch.ops.mybackend.batch_norm_stats.default
BACKWARD_REDUCE = torch.ops.mybackend.batch_norm_backward_reduce.default


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Apply the rewrite to CPU tensors, so that its whole path runs here."""
    monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu", "cuda"))
    yield


def _block(channels_last: bool = True) -> nn.Module:
    torch.manual_seed(0)
    block = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 24, 1, bias=False),
        nn.BatchNorm2d(24, affine=False),
    )
    return block.to(memory_format=torch.channels_last) if channels_last else block


def _image(channels_last: bool = True) -> torch.Tensor:
    x = torch.randn(4, 3, 7, 9)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _targets(gm: torch.fx.GraphModule) -> set[object]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def test_channels_last_training_batch_norm_becomes_reductions_and_elementwise_ops(
    on_cpu: None,
) -> None:
    graphs = _aot_graphs(_block(), _image().requires_grad_())
    forward, backward = _targets(graphs["forward"]), _targets(graphs["backward"])
    assert STATS in forward
    assert torch.ops.aten._native_batch_norm_legit_functional.default not in forward
    assert BACKWARD_REDUCE in backward
    assert torch.ops.aten.native_batch_norm_backward.default not in backward


def test_an_nchw_image_is_rewritten_for_the_channels_last_plan(on_cpu: None) -> None:
    """The table runs before the joint graph's channels-last plan, which
    makes a CNN's activations channels-last; so 4-d inputs are rewritten in
    any layout (Note [Training batch norm])."""
    graphs = _aot_graphs(_block(channels_last=False), _image(False).requires_grad_())
    assert STATS in _targets(graphs["forward"])
    assert BACKWARD_REDUCE in _targets(graphs["backward"])


@pytest.mark.parametrize("why", ["channels not innermost", "cpu tensors", "fp64"])
def test_the_rewrite_keeps_atens_batch_norm_where_it_does_not_apply(
    why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if why != "cpu tensors":
        monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu",))
    torch.manual_seed(0)
    module: nn.Module = nn.Sequential(nn.BatchNorm1d(6), nn.ReLU())
    x = torch.randn(4, 6, 10)  # [N, C, L]: the channels are not innermost
    if why != "channels not innermost":
        module, x = _block(), _image()
    if why == "fp64":
        module, x = module.double(), x.double()
    graphs = _aot_graphs(module, x.requires_grad_())
    assert torch.ops.aten._native_batch_norm_legit_functional.default in _targets(graphs["forward"])
    assert torch.ops.aten.native_batch_norm_backward.default in _targets(graphs["backward"])
    assert STATS not in _targets(graphs["forward"])


@pytest.mark.parametrize("shape", [(4, 16, 7, 9), (12, 16), (2, 16, 3, 4, 5), (3, 16, 5)])
def test_compiled_training_matches_eager_with_running_statistics(
    on_cpu: None, shape: tuple[int, ...]
) -> None:
    """Outputs, input and parameter gradients and running statistics over two
    steps, through the ATen implementations of the rewritten ops."""
    dims = len(shape)
    norm = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[dims](
        16, momentum=0.3
    )
    torch.manual_seed(1)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    eager = nn.Sequential(norm, nn.ReLU())
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}  # 3-d: kept whole
    if dims in formats:
        eager = eager.to(memory_format=formats[dims])
    compiled_module = training_steps_match_eager(eager, shape, memory_format=formats.get(dims))
    for (name, b_eager), b_compiled in zip(
        eager.named_buffers(), compiled_module.buffers(), strict=True
    ):
        torch.testing.assert_close(b_compiled, b_eager, msg=name)


def test_batch_norm_stats_matches_atens_statistics() -> None:
    x = (torch.randn(6, 5, 4, 3) * 4 + 2).to(memory_format=torch.channels_last)
    running_mean, running_var = torch.randn(5), torch.rand(5) + 0.5
    mean, invstd, new_mean, new_var = STATS(x, running_mean, running_var, 0.25, 1e-3)
    want_mean, want_var = running_mean.clone(), running_var.clone()
    _, save_mean, save_invstd = torch.native_batch_norm(
        x, None, None, want_mean, want_var, True, 0.25, 1e-3
    )
    torch.testing.assert_close(mean, save_mean)
    torch.testing.assert_close(invstd, save_invstd)
    torch.testing.assert_close(new_mean, want_mean)
    torch.testing.assert_close(new_var, want_var)
    assert mean.dtype == invstd.dtype == torch.float32


def test_batch_norm_backward_reduce_gives_the_weight_and_bias_gradients() -> None:
    x = torch.randn(6, 5, 4, 3, requires_grad=True)
    weight = torch.ones(5, requires_grad=True)
    bias = torch.zeros(5, requires_grad=True)
    y = F.batch_norm(x, None, None, weight, bias, training=True, eps=1e-5)
    grad = torch.randn_like(y)
    y.backward(grad)
    var, mean = torch.var_mean(x.detach(), [0, 2, 3], correction=0)
    grad_bias, grad_weight = BACKWARD_REDUCE(grad, x.detach(), mean, torch.rsqrt(var + 1e-5))
    torch.testing.assert_close(grad_bias, bias.grad)
    torch.testing.assert_close(grad_weight, weight.grad)


def test_cuda_plan_generates_the_reductions_and_fuses_the_normalization_with_relu(
    on_cpu: None,
) -> None:
    """On (fake) CUDA tensors each reduction is a generated norm group and the
    normalization, ReLU and their backward are generated pointwise kernels:
    no batch-norm op is left to ATen."""
    graphs = _aot_graphs(_block(), _image().requires_grad_())
    for kind, op, reduction in (
        ("forward", "mybackend::batch_norm_stats.default", "batch_norm_stats"),
        ("backward", "mybackend::batch_norm_backward_reduce.default", "batch_norm_backward_reduce"),
    ):
        kernels, ops = _kernels(graphs[kind], generated_kernels=True)
        norms = [k for k in kernels if k["kind"] == "norm"]
        assert len(norms) == 2, kernels
        assert all(ops[k["nodes"][0]] == op and reduction in k["spec"] for k in norms), norms
        leftover = [
            ops[n]
            for k in kernels
            if k["kind"] == "aten_sequence"
            for n in k["nodes"]
            if "batch_norm" in ops[n] or "relu" in ops[n] or "threshold" in ops[n]
        ]
        assert leftover == [], leftover
    forward_kernels, forward_ops = _kernels(graphs["forward"], generated_kernels=True)
    relu_groups = [
        k
        for k in forward_kernels
        if k["kind"] == "pointwise" and "aten::relu.default" in [forward_ops[n] for n in k["nodes"]]
    ]
    assert len(relu_groups) == 1
    assert {"aten::sub.Tensor", "aten::mul.Tensor"} <= {
        forward_ops[n] for n in relu_groups[0]["nodes"]
    }


def test_autocast_backward_stores_the_relu_gradient_once_in_bf16(on_cpu: None) -> None:
    """Under autocast the input-gradient kernel reads the ReLU gradient (bf16)
    through a cast to f32; the cast rides with that kernel (Note [Widening
    casts ride with their readers]) instead of storing an f32 copy of the
    gradient beside the bf16 one the reduction reads."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        graphs = _aot_graphs(_block(), _image().requires_grad_())
    backward = graphs["backward"]
    for node in backward.graph.nodes:  # traced on the CPU: its constants too
        device = node.kwargs.get("device")
        if isinstance(device, torch.device) and device.type == "cpu":
            node.kwargs = {**node.kwargs, "device": torch.device("cuda")}
    backward.recompile()
    kernels, ops = _kernels(backward, generated_kernels=True)
    relu_backward = [
        k
        for k in kernels
        if k["kind"] == "pointwise" and "aten::where.self" in [ops[n] for n in k["nodes"]]
    ]
    assert relu_backward, kernels
    for k in relu_backward:
        stored = re.findall(r"\bout\d+ (\w+)", k["spec"])
        assert stored == ["bf16"], k["spec"]
    input_gradients = [
        k
        for k in kernels
        if k["kind"] == "pointwise"
        and ops[k["nodes"][0]] == "aten::_to_copy.default"
        and "aten::sub.Tensor" in [ops[n] for n in k["nodes"]]
    ]
    assert input_gradients, kernels
    for k in input_gradients:
        assert "out0 f32" not in k["spec"], k["spec"]


def test_cuda_plan_refuses_a_batch_norm_reduction_over_a_contiguous_layout() -> None:
    """The lowering checks the IR's layout itself: channels not innermost
    would need a transposed copy of the activation."""

    def stats(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return STATS(x, mean, var, 0.1, 1e-5)

    from tests.unit.test_fusion import _kernels as _fn_kernels

    kernels = _fn_kernels(
        stats, ((2, 8, 3, 3), torch.float32), ((8,), torch.float32), ((8,), torch.float32)
    )
    assert [k["kind"] for k in kernels] == ["aten_sequence"], kernels
    assert "channels are not innermost" in kernels[0]["why"]
