"""Stage 7: the attention planner (cuDNN SDPA groups) on ATen graphs.

The graphs come from aot_autograd on fake CPU tensors, retraced with fake
CUDA tensors (helpers of test_matmul_plan). On a CUDA machine sdpa
dispatches to the flash kernel without a mask and to the memory-efficient
one with a mask (what HF BERT and GPT-2 pass); a CPU machine cannot run
that choice, so the modules call those aten ops directly. Compiling needs no
GPU: cuDNN is first asked on the first run.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.unit.test_matmul_plan import _aot_graphs, _kernels

aten = torch.ops.aten
BF16 = torch.bfloat16


class _Flash(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, scale=0.125)[0]


class _FlashDropout(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.1, False)[0]


class _Efficient(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> Any:
        bias = m.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        return aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False)[0]


class _HandWritten(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> Any:
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1)) + m
        return torch.matmul(torch.softmax(s, dim=-1), v)


def _graphs(module: nn.Module, shapes: list[tuple[int, ...]], train: bool) -> Any:
    with FakeTensorMode():
        args = [
            torch.randn(*s, dtype=BF16, requires_grad=train and i < 3) for i, s in enumerate(shapes)
        ]
        if train:
            return _aot_graphs(module, *args)
        with torch.no_grad():
            return _aot_graphs(module, *args)


def _attention(gm: torch.fx.GraphModule, **options: Any) -> list[dict[str, Any]]:
    kernels, ops = _kernels(gm, **options)
    found = [k for k in kernels if k["kind"] == "attention"]
    for k in found:
        k["ops"] = [ops[n] for n in k["nodes"]]
    whys = " ".join(k["why"] for k in kernels)
    for k in found:
        k["all_whys"] = whys
    return found if found else [{"all_whys": whys, "none": True}]


QKV = [(2, 4, 128, 64)] * 3
QKV77 = [(2, 4, 77, 64)] * 3


def test_flash_forward_and_backward_become_cudnn_groups() -> None:
    graphs = _graphs(_Flash(), QKV, train=True)
    (fwd,) = _attention(graphs["forward"])
    assert fwd["ops"] == ["aten::_scaled_dot_product_flash_attention.default"]
    assert "flash_forward" in fwd["spec"] and "causal=true scale=0.125" in fwd["spec"]
    assert "logsumexp=%" in fwd["spec"]  # the backward reads it
    assert fwd["compiled"] is True
    (bwd,) = _attention(graphs["backward"])
    assert bwd["ops"] == ["aten::_scaled_dot_product_flash_attention_backward.default"]
    assert "grad_out=%" in bwd["spec"]
    assert bwd["kernel"] == "cudnn sdpa: flash_backward causal"


def test_flash_inference_computes_no_logsumexp() -> None:
    (fwd,) = _attention(_graphs(_Flash(), QKV, train=False)["inference"])
    assert "logsumexp" not in fwd["spec"]


@pytest.mark.parametrize("train", [False, True])
def test_efficient_attention_with_mask_becomes_a_group_with_bias(train: bool) -> None:
    graphs = _graphs(_Efficient(), [*QKV, (2, 1, 128, 128)], train=train)
    (fwd,) = _attention(graphs["forward" if train else "inference"])
    assert "efficient_forward" in fwd["spec"] and "bias=%" in fwd["spec"]
    if train:
        (bwd,) = _attention(graphs["backward"])
        assert "efficient_backward" in bwd["spec"] and "bias=%" in bwd["spec"]


@pytest.mark.parametrize("train", [False, True])
def test_mask_over_77_keys_stays_the_aten_op(train: bool) -> None:
    # A bias over 77 keys: cuDNN's masked SDPA gave NaN gradients on an H200.
    graphs = _graphs(_Efficient(), [*QKV77, (2, 1, 77, 77)], train=train)
    (found,) = _attention(graphs["forward" if train else "inference"])
    assert found.get("none") and "not a multiple of 8" in found["all_whys"], found


def test_dropout_stays_the_aten_op() -> None:
    (found,) = _attention(_graphs(_FlashDropout(), QKV, train=False)["inference"])
    assert found.get("none") and "dropout_p is not the literal 0" in found["all_whys"]


def test_option_off_plans_no_attention() -> None:
    (found,) = _attention(_graphs(_Flash(), QKV, train=False)["inference"], cudnn_attention=False)
    assert found.get("none")


def test_hand_written_attention_is_one_group_at_inference() -> None:
    (group,) = _attention(_graphs(_HandWritten(), [*QKV, (2, 1, 128, 128)], False)["inference"])
    assert group["ops"].count("aten::bmm.default") == 2
    assert "aten::_softmax.default" in group["ops"]
    assert "decomposed" in group["spec"] and "scale=0.125" in group["spec"]


def test_hand_written_attention_in_training_is_left_to_the_matmul_planner() -> None:
    # The forward saves the probabilities for the backward: no SDPA group.
    graphs = _graphs(_HandWritten(), [*QKV, (2, 1, 128, 128)], train=True)
    (found,) = _attention(graphs["forward"])
    assert found.get("none")
