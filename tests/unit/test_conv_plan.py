"""Stage 7: the conv planner (CUDA engine II) on ATen graphs of real modules.

Graphs come from aot_autograd on small CPU tensors and are retraced with fake
CUDA tensors (the helpers of test_matmul_plan), so the planner sees CUDA
partitions; compiling needs no GPU (cuDNN is first asked on the first run).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from mybackend.decompositions import decomposition_table
from tests.unit.test_matmul_plan import _aot_graphs, _inference, _kernels

F32 = torch.float32


def _convs(gm: torch.fx.GraphModule, **options: Any) -> list[dict[str, Any]]:
    kernels, ops = _kernels(gm, **options)
    found = [k for k in kernels if k["kind"] == "conv"]
    for k in found:
        k["ops"] = [ops[n] for n in k["nodes"]]
    return found


class Bottleneck(nn.Module):
    """conv-bn-relu, conv-bn, + identity, relu: a ResNet block's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 1, bias=False)
        self.b2 = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


X = torch.randn(2, 8, 6, 6)


def test_inference_block_folds_batch_norm_residual_and_relu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fold matches batch norm kept whole; mybackend's own table decomposes
    # it (see the next test), so take it out of the table here.
    import tests.unit.test_matmul_plan as graphs

    kept = torch.ops.aten._native_batch_norm_legit_no_training.default
    table = {op: fn for op, fn in decomposition_table().items() if op is not kept}
    monkeypatch.setattr(graphs, "decomposition_table", lambda: table)
    block = Bottleneck().eval()
    convs = _convs(_inference(block, X))
    assert [k["ops"] for k in convs] == [
        [
            "aten::convolution.default",
            "aten::_native_batch_norm_legit_no_training.default",
            "aten::relu.default",
        ],
        [
            "aten::convolution.default",
            "aten::_native_batch_norm_legit_no_training.default",
            "aten::add.Tensor",
            "aten::relu.default",
        ],
    ]
    assert "epilogue=batch_norm+relu" in convs[0]["spec"]
    assert "epilogue=batch_norm+residual+relu" in convs[1]["spec"]
    assert convs[1]["why"] == "cuDNN conv_fprop with epilogue batch_norm+residual+relu"
    assert convs[0]["compiled"] is True
    assert convs[0]["kernel"] == "cudnn: conv_fprop epilogue batch_norm+relu"


def test_decomposed_batch_norm_runs_after_the_conv_in_one_generated_kernel() -> None:
    """mybackend's table decomposes inference batch norm into x*scale + shift
    (mybackend/decompositions.py): each conv is a plain cuDNN group, and the
    affine, the residual add and the ReLU are one generated kernel each."""
    block = Bottleneck().eval()
    gm = _inference(block, X)
    convs = _convs(gm)
    assert [k["ops"] for k in convs] == [["aten::convolution.default"]] * 2
    kernels, ops = _kernels(gm, generated_kernels=True)
    pointwise = [[ops[n] for n in k["nodes"]] for k in kernels if k["kind"] == "pointwise"]
    assert any("aten::relu.default" in p and "aten::mul.Tensor" in p for p in pointwise)


def test_conv_bias_relu_is_one_graph() -> None:
    model = nn.Sequential(nn.Conv2d(8, 4, 3, stride=2, padding=1, dilation=1), nn.ReLU())
    (conv,) = _convs(_inference(model, X))
    assert conv["ops"] == ["aten::convolution.default", "aten::relu.default"]
    assert "stride=[2,2] padding=[1,1] dilation=[1,1] groups=1" in conv["spec"]
    assert "epilogue=bias+relu" in conv["spec"]


def test_training_graphs_plan_forward_and_backward_groups() -> None:
    graphs = _aot_graphs(Bottleneck(), X.clone().requires_grad_())
    forward = _convs(graphs["forward"])
    # Training batch norm needs the conv output: the first conv fuses
    # nothing; the block's end (+ identity, relu) follows the second one's
    # batch norm, so it is no conv epilogue either.
    assert [k["ops"] for k in forward] == [["aten::convolution.default"]] * 2
    backward = _convs(graphs["backward"])
    assert [k["ops"] for k in backward] == [["aten::convolution_backward.default"]] * 2
    assert all("cuDNN conv_dgrad/conv_wgrad" in k["why"] for k in backward)


def test_option_cudnn_off_and_disabled_class_plan_no_conv_groups() -> None:
    gm = _inference(Bottleneck().eval(), X)
    assert _convs(gm, cudnn=False) == []
    assert _convs(gm, disabled_op_classes=["convolution"]) == []


def test_transposed_and_1d_convolutions_stay_aten() -> None:
    for model, x in (
        (nn.ConvTranspose2d(8, 4, 3), X),
        (nn.Conv1d(8, 4, 3), torch.randn(2, 8, 10)),
    ):
        gm = _inference(model, x)
        kernels, _ = _kernels(gm)
        assert not [k for k in kernels if k["kind"] == "conv"]
        assert any("no cuDNN group" in k["why"] for k in kernels), kernels
