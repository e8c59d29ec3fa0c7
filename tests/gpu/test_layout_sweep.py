"""GPU-marked: every op with a layout contract, fed the layouts the plan makes.

The channels-last plan (Note [Channels-last planning] in
mybackend/passes/layout.py) hands the ops after a convolution tensors in
strides they were not traced with, and FakeTensor propagation cannot tell
whether a kernel takes them: CUDA's native_group_norm refused a channels-last
input (issue 36). The capability registry states a contract per op (Note
[Layout contracts] in src_cpp/capability/registry.h): "any" strides, or the
"traced" ones. This sweep checks both kinds against eager, op by op.

CASES maps each op of ``_C.layout_contracts()`` that takes a 4-D float tensor
to a torch-level function that makes that ATen op (the forward op's function
for a backward op). Each case runs in two layouts, each compiled on its own
(fullgraph, strict: a failure raises instead of falling back):

* planned: ``op(conv(x))`` with an NCHW ``x``: the plan makes the
  convolution's output, the op's input, channels-last;
* permuted: ``op(conv(x).permute(0, 2, 3, 1))``: traced as a permuted view of
  an NCHW tensor, the op's input turns contiguous under the plan (not for
  views that eager itself refuses on it).

Each also checks that the plan ran: the forward graph's convolutions write
channels-last (outputs are made contiguous, or the plan would stand down).

The convolution is 1x1 and permutes channels, over values that bf16 holds
exactly: eager and compiled hand the op the same numbers, so even ops that
select or round (argmax, max pooling, floor) must match, and values are
distinct where there are enough of them, so no maximum ties. [2, 8, 8, 8]
inputs make every op valid on the permuted tensor as well. fp32 and bf16;
"forward" under no_grad, "train" the forward and the gradients of the input
and of the convolution's weight. A summary at the end lists the swept ops
that never reached a compiled graph (decomposed before the backend).

The last test fails when an op with an "any" contract has no case here and
is not in EXCLUDED, which says why an op cannot take a 4-D float tensor.

    python -m pytest tests/gpu/test_layout_sweep.py -q   # -k "fp32" or an op name for a part
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves, tree_map_only

from mybackend import _C
from mybackend.passes.layout_contracts import ir_op_name
from mybackend.reports import GraphRecord
from tests.gpu.test_conv import _cudnn_tf32
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

aten, prims = torch.ops.aten, torch.ops.prims
DEVICE = "cuda"
SHAPE = (2, 8, 8, 8)  # N = 2, C = H = W = 8: every op also takes the permuted tensor
PERMUTATION = (3, 0, 6, 1, 7, 4, 2, 5)  # output channel k reads input channel PERMUTATION[k]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Outputs compared elementwise; gradients elementwise in fp32, by the norm of
# the difference in bf16 (the weight's gradient sums 128 products).
TOLERANCES = {
    torch.float32: ({"rtol": 1e-4, "atol": 1e-4}, {"rtol": 1e-3, "atol": 1e-3}),
    torch.bfloat16: ({"rtol": 2e-2, "atol": 2e-2}, {"relative_norm": 2e-2}),
}

Fn = Callable[[torch.Tensor], Any]


@dataclasses.dataclass(frozen=True)
class Case:
    fn: Fn  # the op on a 4-D tensor; returns a tensor or a tuple of them
    domain: tuple[float, float] = (-2.0, 2.0)  # where the op's input values lie
    phases: tuple[str, ...] = ("forward", "train")
    variants: tuple[str, ...] = ("planned", "permuted")  # keys of VARIANTS


def case(
    fn: Fn, domain: tuple[float, float] = (-2.0, 2.0), grad: bool = True, permuted: bool = True
) -> Case:
    phases = ("forward", "train") if grad else ("forward",)
    return Case(fn, domain, phases, ("planned", "permuted") if permuted else ("planned",))


def backward_of(forward: Case) -> Case:
    """A backward op's case: its forward's function, run only in training."""
    return dataclasses.replace(forward, phases=("train",))


POSITIVE, UNIT, PROBABILITY = (0.25, 2.0), (-0.9, 0.9), (0.1, 0.9)


def _t(x: torch.Tensor) -> torch.Tensor:
    """The other spatial order: a second operand in another layout."""
    return x.transpose(2, 3)


def _ramp(x: torch.Tensor, *shape: int, lo: float = 0.5, hi: float = 1.5) -> torch.Tensor:
    """Constants of x's dtype and device (per-channel weights, a filter)."""
    return torch.linspace(lo, hi, math.prod(shape), device=x.device, dtype=x.dtype).view(shape)


def _idx(x: torch.Tensor, *values: int) -> torch.Tensor:
    return torch.tensor(values, device=x.device)


def _batch_norm(x: torch.Tensor, training: bool, stats: bool = True) -> torch.Tensor:
    mean, var = (_ramp(x, 8, lo=-0.2, hi=0.2), _ramp(x, 8)) if stats else (None, None)
    return F.batch_norm(x, mean, var, _ramp(x, 8), _ramp(x, 8, lo=-0.5), training=training)


def _native_batch_norm(x: torch.Tensor) -> torch.Tensor:
    return aten.native_batch_norm.default(x, _ramp(x, 8), None, None, None, True, 0.1, 1e-5)[0]


def _powers_of_two(x: torch.Tensor) -> torch.Tensor:
    """Products of these are exact, whatever the order or precision."""
    return torch.exp2(torch.round(x))


def _gather_index(x: torch.Tensor) -> torch.Tensor:
    return (torch.arange(8, device=x.device).view(1, 8, 1, 1) * 3 % 8).expand(2, 8, 8, 4)


def _scalar(op: Any, value: float) -> Fn:
    """A .Scalar overload, called as such (Python arithmetic makes .Tensor)."""
    return lambda x: op(x, value)


def _unary(names: str, domain: tuple[float, float] = (-2.0, 2.0)) -> dict[str, Case]:
    """Cases of one-operand torch functions, by name."""
    return {f"aten::{name}.default": case(getattr(torch, name), domain) for name in names.split()}


COMPARISONS = ("eq", "ne", "ge", "gt", "le", "lt")


def _mask(op: Any, *other: Any) -> Fn:
    """A comparison (or logical op) whose bool result gates x: differentiable."""
    return lambda x: x * op(x, *(o(x) if callable(o) else o for o in other))


GELU = case(lambda x: (F.gelu(x), F.gelu(x, approximate="tanh")))
SIGMOID, SILU, TANH, RELU = case(torch.sigmoid), case(F.silu), case(torch.tanh), case(torch.relu)
HARDSIGMOID, HARDSWISH = case(F.hardsigmoid, (-4.0, 4.0)), case(F.hardswish, (-4.0, 4.0))
LEAKY_RELU, ELU = case(lambda x: F.leaky_relu(x, 0.1)), case(F.elu)
SOFTPLUS = case(lambda x: (F.softplus(x), F.softplus(x, beta=2.0, threshold=1.0)))
SOFTMAX = case(lambda x: (torch.softmax(x, 1), torch.softmax(x, -1)))
LOG_SOFTMAX = case(lambda x: (torch.log_softmax(x, 1), torch.log_softmax(x, -1)))
LAYER_NORM = case(
    lambda x: (F.layer_norm(x, (8,), _ramp(x, 8), _ramp(x, 8)), F.layer_norm(x, (8, 8)))
)
RMS_NORM = case(lambda x: F.rms_norm(x, (8,), _ramp(x, 8)))
BATCH_NORM_TRAIN = case(lambda x: _batch_norm(x, True))
GROUP_NORM = case(lambda x: (F.group_norm(x, 2, _ramp(x, 8), _ramp(x, 8)), F.group_norm(x, 8)))
MAX_POOL = case(lambda x: (*F.max_pool2d(x, 2, return_indices=True), F.max_pool2d(x, 3, 2, 1)))
AVG_POOL = case(lambda x: (F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)))
ADAPTIVE_AVG_POOL = case(lambda x: F.adaptive_avg_pool2d(x, (3, 5)))
NEAREST = case(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"))
BILINEAR = case(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"))
NEAREST_SIZE = case(lambda x: aten.upsample_nearest2d.default(x, [12, 16]))
BILINEAR_SIZE = case(lambda x: aten.upsample_bilinear2d.default(x, [12, 16], True))
# Note [Resampling kept whole]: these become mybackend::interpolate.
INTERPOLATE = case(lambda x: (
    F.interpolate(x, scale_factor=2, mode="bilinear"),
    F.interpolate(x, size=(5, 11), mode="nearest"),
    F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
))  # fmt: skip
DROPOUT = case(lambda x: aten.native_dropout.default(x, 0.0, True)[0])  # p = 0: deterministic
CONVOLUTION = case(lambda x: F.conv2d(x, _ramp(x, 8, 8, 3, 3, lo=-0.2, hi=0.2), padding=1))

# Every op of _C.layout_contracts() that takes a 4-D float tensor. Ops that
# round or select get scalars bf16 holds exactly (0.375, not 0.3), so both
# sides divide by the same number.
# fmt: off
CASES: dict[str, Case] = {
    # Pointwise, one operand.
    **_unary("abs atan ceil cos cosh erf exp exp2 expm1 floor neg round sign sin sinh trunc"),
    **_unary("acos asin erfinv", UNIT),
    **_unary("log log1p log2 reciprocal rsqrt sqrt", POSITIVE),
    "aten::logit.default": case(torch.logit, PROBABILITY),
    "aten::tan.default": case(torch.tan, (-1.2, 1.2)),
    "aten::isnan.default": case(lambda x: x * torch.isnan(x.log())),
    "aten::isinf.default": case(lambda x: x * torch.isinf(1 / x.round())),
    "aten::nan_to_num.default": case(lambda x: torch.nan_to_num(x.log(), nan=0.5, neginf=-1.0)),
    "aten::clamp.default": case(lambda x: x.clamp(-1.0, 1.0)),
    "aten::clamp.Tensor": case(lambda x: torch.clamp(x, _t(x) - 0.5, _t(x) + 0.5)),
    "aten::clamp_min.default": case(lambda x: torch.clamp_min(x, -0.5)),
    "aten::clamp_max.default": case(lambda x: torch.clamp_max(x, 0.5)),
    "aten::hardtanh.default": case(lambda x: F.hardtanh(x, -1.0, 1.0)),
    # Activations and their gradients.
    "aten::relu.default": RELU,
    "aten::threshold_backward.default": backward_of(RELU),
    "aten::gelu.default": GELU,
    "aten::gelu_backward.default": backward_of(GELU),
    "aten::sigmoid.default": SIGMOID,
    "aten::sigmoid_backward.default": backward_of(SIGMOID),
    "aten::silu.default": SILU,
    "aten::silu_backward.default": backward_of(SILU),
    "aten::tanh.default": TANH,
    "aten::tanh_backward.default": backward_of(TANH),
    "aten::mish.default": case(F.mish),
    "aten::hardsigmoid.default": HARDSIGMOID,
    "aten::hardsigmoid_backward.default": backward_of(HARDSIGMOID),
    "aten::hardswish.default": HARDSWISH,
    "aten::hardswish_backward.default": backward_of(HARDSWISH),
    "aten::leaky_relu.default": LEAKY_RELU,
    "aten::leaky_relu_backward.default": backward_of(LEAKY_RELU),
    "aten::elu.default": ELU,
    "aten::elu_backward.default": backward_of(ELU),
    "aten::softplus.default": SOFTPLUS,
    "aten::softplus_backward.default": backward_of(SOFTPLUS),
    # Pointwise, two or three operands (the second in another layout or broadcast).
    "aten::add.Tensor": case(lambda x: (x + _t(x), x + x[:, :1])),
    "aten::add.Scalar": case(_scalar(aten.add.Scalar, 0.5)),
    "aten::sub.Tensor": case(lambda x: (x - _t(x), x - x[..., :1])),
    "aten::sub.Scalar": case(_scalar(aten.sub.Scalar, 0.5)),
    "aten::rsub.Tensor": case(lambda x: torch.rsub(x, _t(x))),
    "aten::rsub.Scalar": case(_scalar(aten.rsub.Scalar, 1.0)),
    "aten::mul.Tensor": case(lambda x: (x * _t(x), x * x[:, :, :1])),
    "aten::mul.Scalar": case(_scalar(aten.mul.Scalar, 1.5)),
    "aten::div.Tensor": case(lambda x: x / (_t(x).abs() + 0.5)),
    "aten::div.Scalar": case(_scalar(aten.div.Scalar, 3.0)),
    "aten::div.Tensor_mode": case(lambda x: (torch.div(x, 0.375, rounding_mode="floor"),
                                             torch.div(x, _t(x), rounding_mode="trunc"))),
    "aten::pow.Scalar": case(lambda x: torch.pow(2.0, x)),
    "aten::pow.Tensor_Scalar": case(lambda x: (x**3, x.abs() ** 0.5)),
    "aten::pow.Tensor_Tensor": case(lambda x: torch.pow(x, _t(x)), POSITIVE),
    "aten::atan2.default": case(lambda x: torch.atan2(x, _t(x))),
    "aten::maximum.default": case(lambda x: torch.maximum(x, _t(x))),
    "aten::minimum.default": case(lambda x: torch.minimum(x, _t(x))),
    "aten::fmod.Scalar": case(lambda x: torch.fmod(x, 0.75)),
    "aten::fmod.Tensor": case(lambda x: torch.fmod(x, _t(x).abs() + 0.5)),
    "aten::remainder.Scalar": case(lambda x: torch.remainder(x, 0.75)),
    # remainder jumps by the divisor where a / b crosses an integer: a divisor
    # exact in every dtype keeps fused fp32 and eager bf16 on the same side.
    "aten::remainder.Tensor": case(lambda x: torch.remainder(x, (_t(x) > 0.5).to(x.dtype) + 0.5)),
    "aten::lerp.Scalar": case(lambda x: torch.lerp(x, _t(x), 0.3)),
    "aten::lerp.Tensor": case(lambda x: torch.lerp(x, _t(x), torch.sigmoid(x))),
    "aten::addcmul.default": case(lambda x: torch.addcmul(x, _t(x), x[:, :1], value=0.5)),
    "aten::addcdiv.default": case(lambda x: torch.addcdiv(x, _t(x), x.abs() + 1.0, value=0.5)),
    "aten::where.self": case(lambda x: torch.where(x > 0, x, _t(x) * 0.1)),
    "aten::masked_fill.Scalar": case(lambda x: x.masked_fill(x < 0, 0.25)),
    "aten::masked_fill.Tensor": case(lambda x: x.masked_fill(x < 0, x.amax())),
    # Comparisons and logical ops: their bool results gate x.
    **{f"aten::{op}.Scalar": case(_mask(getattr(aten, op).Scalar, 0.5)) for op in COMPARISONS},
    **{f"aten::{op}.Tensor": case(_mask(getattr(torch, op), _t)) for op in COMPARISONS},
    "aten::logical_and.default": case(_mask(torch.logical_and, torch.round)),
    "aten::logical_or.default": case(_mask(torch.logical_or, torch.round)),
    "aten::logical_xor.default": case(_mask(torch.logical_xor, torch.round)),
    "aten::logical_not.default": case(lambda x: x * torch.logical_not(x.round())),
    # Copies, casts, fills and factories that read a tensor.
    "aten::clone.default": case(lambda x: torch.clone(x) * 2),
    "aten::_to_copy.default": case(lambda x: x.to(torch.float64)),
    "prims::convert_element_type.default": case(
        lambda x: prims.convert_element_type.default(x, torch.float64), grad=False),
    "aten::copy.default": case(lambda x: torch.zeros_like(x).copy_(_t(x))),
    "aten::fill.Scalar": case(lambda x: x + aten.fill.Scalar(x, 0.5)),
    "aten::full_like.default": case(lambda x: x + torch.full_like(x, 0.5)),
    "aten::ones_like.default": case(lambda x: x + torch.ones_like(x)),
    "aten::zeros_like.default": case(lambda x: x + torch.zeros_like(x)),
    "aten::new_empty.default": case(lambda x: x.new_empty(x.shape).copy_(x) * 2),
    "aten::new_full.default": case(lambda x: x + x.new_full(x.shape, 0.5)),
    "aten::new_ones.default": case(lambda x: x + x.new_ones(x.shape)),
    "aten::new_zeros.default": case(lambda x: x + x.new_zeros(x.shape)),
    # Reductions.
    "aten::sum.default": case(torch.sum),
    "aten::sum.dim_IntList": case(lambda x: (x.sum(1), x.sum((2, 3)), x.sum((0, 2), keepdim=True))),
    "aten::mean.default": case(torch.mean),
    "aten::mean.dim": case(lambda x: (x.mean(1), x.mean((2, 3)), x.mean(-1, keepdim=True))),
    "aten::amax.default": case(lambda x: (torch.amax(x, 1), torch.amax(x, (2, 3)))),
    "aten::amin.default": case(lambda x: (torch.amin(x, 1), torch.amin(x, (0, 3)))),
    "aten::max.default": case(torch.max),
    "aten::max.dim": case(lambda x: (*torch.max(x, 1), *torch.max(x, -1))),
    "aten::min.default": case(torch.min),
    "aten::min.dim": case(lambda x: (*torch.min(x, 1), *torch.min(x, -1))),
    "aten::argmax.default": case(lambda x: (torch.argmax(x, 1), torch.argmax(x)), grad=False),
    "aten::argmin.default": case(lambda x: (torch.argmin(x, 3), torch.argmin(x)), grad=False),
    "aten::prod.default": case(lambda x: torch.prod(_powers_of_two(x)[:, :2, 2:6])),
    "aten::prod.dim_int": case(lambda x: (torch.prod(_powers_of_two(x), 1),
                                          torch.prod(_powers_of_two(x), -1))),
    "aten::all.default": case(lambda x: x * torch.all(x.round())),
    "aten::all.dim": case(lambda x: x * torch.all(x.round(), 1, keepdim=True)),
    "aten::any.default": case(lambda x: x * torch.any(x.round())),
    "aten::any.dim": case(lambda x: x * torch.any(x.round(), 1, keepdim=True)),
    "aten::any.dims": case(lambda x: x * torch.any(x.round(), (2, 3), keepdim=True)),
    "aten::logsumexp.default": case(lambda x: (torch.logsumexp(x, 1), torch.logsumexp(x, (2, 3)))),
    "aten::std.correction": case(lambda x: (torch.std(x, 1), torch.std(x, (2, 3), correction=0))),
    "aten::var.correction": case(lambda x: (torch.var(x, 1), torch.var(x, (0, 2, 3)))),
    "aten::var_mean.correction": case(lambda x: (*torch.var_mean(x, 1),
                                                 *torch.var_mean(x, (2, 3)))),
    # Normalizations.
    "aten::_softmax.default": SOFTMAX,
    "aten::_softmax_backward_data.default": backward_of(SOFTMAX),
    "aten::_log_softmax.default": LOG_SOFTMAX,
    "aten::_log_softmax_backward_data.default": backward_of(LOG_SOFTMAX),
    "aten::native_layer_norm.default": LAYER_NORM,
    "aten::native_layer_norm_backward.default": backward_of(LAYER_NORM),
    "aten::_fused_rms_norm.default": RMS_NORM,
    "aten::_fused_rms_norm_backward.default": backward_of(RMS_NORM),
    "aten::_native_batch_norm_legit_no_training.default": case(lambda x: _batch_norm(x, False)),
    "aten::_native_batch_norm_legit_functional.default": BATCH_NORM_TRAIN,
    "aten::_native_batch_norm_legit.no_stats": case(lambda x: _batch_norm(x, True, stats=False)),
    "aten::native_batch_norm.default": case(_native_batch_norm),
    "aten::native_batch_norm_backward.default": backward_of(BATCH_NORM_TRAIN),
    "aten::native_group_norm.default": GROUP_NORM,  # a "traced" contract (issue 36)
    "aten::native_group_norm_backward.default": backward_of(GROUP_NORM),
    # Pooling, resampling, padding.
    "aten::max_pool2d_with_indices.default": MAX_POOL,
    "aten::max_pool2d_with_indices_backward.default": backward_of(MAX_POOL),
    "aten::avg_pool2d.default": AVG_POOL,
    "aten::avg_pool2d_backward.default": backward_of(AVG_POOL),
    "aten::_adaptive_avg_pool2d.default": ADAPTIVE_AVG_POOL,
    "aten::_adaptive_avg_pool2d_backward.default": backward_of(ADAPTIVE_AVG_POOL),
    "aten::upsample_nearest2d.vec": NEAREST,
    "aten::upsample_nearest2d.default": NEAREST_SIZE,
    "aten::upsample_nearest2d_backward.default": backward_of(NEAREST_SIZE),
    "aten::upsample_bilinear2d.vec": BILINEAR,
    "aten::upsample_bilinear2d.default": BILINEAR_SIZE,
    "aten::upsample_bilinear2d_backward.default": backward_of(BILINEAR_SIZE),
    "mybackend::interpolate.default": INTERPOLATE,
    "mybackend::interpolate_backward.default": backward_of(INTERPOLATE),
    "aten::_unsafe_index.Tensor": case(
        lambda x: aten._unsafe_index.Tensor(x, [None, None, _idx(x, 0, 0, 5, 7)])),
    "aten::constant_pad_nd.default": case(lambda x: (F.pad(x, (1, 2, 0, 3), value=0.5),
                                                     F.pad(x, (-1, 1)))),
    "aten::reflection_pad2d.default": case(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect")),
    "aten::replication_pad2d.default": case(lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate")),
    "aten::native_dropout.default": DROPOUT,
    "aten::native_dropout_backward.default": backward_of(DROPOUT),
    # Data movement and indexing.
    "aten::cat.default": case(lambda x: (torch.cat([x, _t(x)], 1), torch.cat([x, x * 2], -1))),
    "aten::stack.default": case(lambda x: torch.stack([x, _t(x)], 2)),
    "aten::flip.default": case(lambda x: x.flip(1, 3)),
    "aten::repeat.default": case(lambda x: x.repeat(1, 2, 1, 2)),
    "aten::tril.default": case(lambda x: x.tril(1)),
    "aten::triu.default": case(lambda x: x.triu(-1)),
    "aten::index_select.default": case(lambda x: x.index_select(1, _idx(x, 7, 4, 1, 4))),
    "aten::gather.default": case(lambda x: x.gather(1, _gather_index(x))),
    "aten::index.Tensor": case(lambda x: (x[:, _idx(x, 6, 1, 1)],
                                          x[_idx(x, 1, 0), :, _idx(x, 2, 5)])),
    "aten::index_put.default": case(lambda x: torch.index_put(x, (_idx(x, 1, 0),), x * 0.5, True)),
    "aten::scatter_add.default": case(lambda x: x.scatter_add(1, _gather_index(x), x[..., :4])),
    "aten::select_scatter.default": case(lambda x: torch.select_scatter(x, x[:, 0] * 2, 1, 3)),
    "aten::slice_scatter.default": case(lambda x: torch.slice_scatter(x, 2 * x[:, ::2], 1, step=2)),
    # Views (consumed by a kernel that reads their strides), then the op itself.
    "aten::permute.default": case(lambda x: (x.permute(0, 3, 1, 2).contiguous(),
                                             x.permute(3, 2, 1, 0) * 2)),
    "aten::transpose.int": case(lambda x: x.transpose(1, 3) * 2),
    # Eager's own view refuses the permuted tensor.
    "aten::view.default": case(lambda x: (x.view(2, 8, 64) * 2, x.view(2, 512)), permuted=False),
    "aten::_unsafe_view.default": case(lambda x: aten._unsafe_view.default(x * 2, [2, 8, 64]),
                                       permuted=False),
    "aten::reshape.default": case(lambda x: x.reshape(16, 64) * 2),
    "aten::expand.default": case(lambda x: x * x[:, :1].expand(2, 8, 8, 8)),
    "aten::squeeze.default": case(lambda x: x[:, :1].squeeze() * 2),
    "aten::squeeze.dim": case(lambda x: x[:, :1].squeeze(1) * 2),
    "aten::squeeze.dims": case(lambda x: torch.squeeze(x[:, :1, :, :1], (1, 3)) * 2),
    "aten::unsqueeze.default": case(lambda x: x.unsqueeze(2) * 2),
    "aten::select.int": case(lambda x: (x[:, 3] * 2, x[..., 5] * 2)),
    "aten::slice.Tensor": case(lambda x: (x[:, 1:7:2] * 2, x[..., 2:] * 2)),
    "aten::split.Tensor": case(lambda x: [t * 2 for t in torch.split(x, 3, 1)]),
    "aten::split_with_sizes.default": case(lambda x: [t * 2 for t in torch.split(x, [3, 5], -1)]),
    "aten::unbind.int": case(lambda x: [t * 2 for t in x.unbind(1)]),
    "aten::unfold.default": case(lambda x: x.unfold(3, 4, 2) * 2),
    "aten::diagonal.default": case(lambda x: torch.diagonal(x, 0, 2, 3) * 2),
    "aten::alias.default": case(lambda x: aten.alias.default(x) * 2),
    "aten::detach.default": case(lambda x: x * x.detach()),
    "aten::as_strided.default": case(lambda x: x.as_strided((2, 8, 4, 4), (512, 64, 16, 2)) * 2),
    "aten::convolution.default": CONVOLUTION,
    "aten::convolution_backward.default": backward_of(CONVOLUTION),
}
# fmt: on


def _because(reason: str, *ops: str) -> dict[str, str]:
    return dict.fromkeys(ops, reason)


# Ops with a contract that cannot take a 4-D float tensor, and why.
EXCLUDED: dict[str, str] = {
    **_because("matrix products: 2-D and 3-D operands (test_matmul.py)", "aten::addmm.default",
               "aten::baddbmm.default", "aten::bmm.default", "aten::mm.default"),
    **_because("a factory: reads no tensor", "aten::arange.default", "aten::arange.start",
               "aten::arange.start_step", "aten::empty.memory_format",
               "aten::empty_strided.default", "aten::full.default", "aten::ones.default",
               "aten::zeros.default", "aten::scalar_tensor.default", "prims::iota.default"),
    **_because("integer and bool tensors only", "aten::bitwise_and.Tensor",
               "aten::bitwise_or.Tensor", "aten::bitwise_xor.Tensor", "aten::bitwise_not.default"),
    **_because("int64 indices into a 2-D table, and its gradient (test_embedding.py)",
               "aten::embedding.default", "aten::embedding_dense_backward.default"),
    **_because("reads a size, no data (dynamic shapes only)", "aten::sym_size.int",
               "aten::sym_numel.default"),
    "aten::t.default": "2-D tensors only",
    "aten::view_as_real.default": "complex tensors only",
    **_because("mybackend's own, made by its decompositions (test_batch_norm.py, "
               "test_cross_entropy.py)", "mybackend::batch_norm_stats.default",
               "mybackend::batch_norm_backward_reduce.default",
               "mybackend::cross_entropy_forward.default",
               "mybackend::cross_entropy_backward.default"),
    "mybackend::group_norm_stats.default": "mybackend's own, made by its decomposition under "
                                           "CUDA graphs (test_group_norm.py)",
    **_because("attention: q, k, v with the head dim innermost (test_attention*.py)", *(
        f"aten::_scaled_dot_product_{kind}{suffix}.default"
        for kind in ("cudnn_attention", "efficient_attention", "flash_attention",
                     "flash_attention_for_cpu")
        for suffix in ("", "_backward")
    )),
}  # fmt: skip

# The variants: the function compiled, of the input and the 1x1 weight. Its
# outputs are made contiguous: the plan keeps its hands off a graph whose
# outputs were traced in strides no memory format names (a permuted view).
VARIANTS: dict[str, Callable[[Fn], Callable[[torch.Tensor, torch.Tensor], Any]]] = {
    "planned": lambda fn: lambda x, w: _dense(fn(F.conv2d(x, w))),
    "permuted": lambda fn: lambda x, w: _dense(fn(F.conv2d(x, w).permute(0, 2, 3, 1))),
}


def _dense(result: Any) -> Any:
    return tree_map_only(torch.Tensor, lambda t: t.contiguous(), result)


# op -> whether its case put it into a compiled graph, for the summary.
REACHED: dict[str, bool] = {}


@pytest.fixture(scope="module", autouse=True)
def _summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    missing = sorted(op for op, reached in REACHED.items() if not reached)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if REACHED and reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # not the last test's captured teardown
            reporter.write_line(
                f"\nlayout sweep: {len(REACHED) - len(missing)} of {len(REACHED)} swept ops "
                "reached a compiled graph; never reached (decomposed before the backend, or "
                "never made):" + "".join(f"\n  {op}" for op in missing)
            )


def _bf16_values(lo: float, hi: float) -> torch.Tensor:
    """Every bf16 number in [lo, hi) at least 2**-6 away from zero."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16).float()
    keep = torch.isfinite(values) & (values >= lo) & (values < hi) & (values.abs() >= 2**-6)
    return values[keep].unique()


def _input(domain: tuple[float, float], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """x of SHAPE: bf16 numbers (exact in fp32 and TF32 too), distinct where
    the domain has enough of them."""
    values = _bf16_values(*domain)
    count = math.prod(SHAPE)
    if values.numel() >= count:
        picked = values[torch.randperm(values.numel(), generator=g)[:count]]
    else:
        picked = values[torch.randint(values.numel(), (count,), generator=g)]
    return picked.view(SHAPE).to(DEVICE, dtype)


def _weight(dtype: torch.dtype) -> torch.Tensor:
    """A 1x1 convolution that permutes channels: exact in every dtype."""
    w = torch.zeros(8, 8, 1, 1)
    for k, c in enumerate(PERMUTATION):
        w[k, c] = 1.0
    return w.to(DEVICE, dtype)


def _run(fn: Callable[..., Any], x: torch.Tensor, w: torch.Tensor, train: bool) -> dict[str, Any]:
    """fn's outputs by position; in training also the gradients of x and w
    for gradients of the float outputs drawn from a fixed seed."""
    if not train:
        with torch.no_grad():
            return {f"output {i}": o for i, o in enumerate(tree_leaves(fn(x, w)))}
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    outputs = list(tree_leaves(fn(x, w)))
    g = torch.Generator().manual_seed(1)
    differentiable = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    assert differentiable, "no output depends on the input: the case has no train phase"
    grads = [torch.randn(o.shape, generator=g).to(o.device, o.dtype) for o in differentiable]
    dx, dw = torch.autograd.grad(differentiable, [x, w], grads, allow_unused=True)
    results = {f"output {i}": o.detach() for i, o in enumerate(outputs)}
    return {**results, "input.grad": dx, "weight.grad": dw}


def _compare(got: dict[str, Any], want: dict[str, Any], dtype: torch.dtype) -> None:
    out_tol, grad_tol = TOLERANCES[dtype]
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        if not isinstance(w, torch.Tensor):  # a gradient that does not flow, or a number
            assert g == w, (name, g, w)
            continue
        assert isinstance(g, torch.Tensor), (name, g)
        assert (g.shape, g.dtype) == (w.shape, w.dtype), (name, g.shape, g.dtype, w.shape, w.dtype)
        tol = grad_tol if name.endswith(".grad") else out_tol
        if not w.dtype.is_floating_point:  # indices, masks: exact
            torch.testing.assert_close(g, w, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
        elif "relative_norm" in tol:
            error = ((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-12)).item()
            assert error <= tol["relative_norm"], (name, error)
        else:
            torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"{n}: {m}")


def _graph_ops(records: list[GraphRecord]) -> set[str]:
    return {
        ir_op_name(n.target)
        for r in records
        for n in r.gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    }


def _assert_planned(records: list[GraphRecord], train: bool) -> None:
    """The plan ran: every convolution of the forward graph writes channels-last."""
    kind = "forward" if train else "inference"
    assert [r.kind for r in records].count(kind) == 1, [r.name for r in records]
    (record,) = [r for r in records if r.kind == kind]
    convs = record.gm.graph.find_nodes(op="call_function", target=aten.convolution.default)
    assert convs, record.name
    for node in convs:
        out = node.meta["val"]
        assert out.is_contiguous(memory_format=torch.channels_last), (
            f"{record.name}: the layout plan left {node} in strides {out.stride()}"
        )


def _params() -> list[Any]:
    return [
        pytest.param(op, dtype, phase, id=f"{op}-{dtype}-{phase}")
        for op, c in CASES.items()
        for dtype in DTYPES
        for phase in c.phases
    ]


@pytest.mark.parametrize("op, dtype_name, phase", _params())
def test_layout_sweep(op: str, dtype_name: str, phase: str) -> None:
    c, dtype, train = CASES[op], DTYPES[dtype_name], phase == "train"
    addresses_storage = _C.layout_contracts().get(op) == "storage"
    x, w = _input(c.domain, dtype, torch.Generator().manual_seed(0)), _weight(dtype)
    # fp32 convolutions (the case's own, and the gradients) in TF32 differ by
    # algorithm, eager's NCHW against the plan's NHWC: compare exact math.
    with _cudnn_tf32(dtype is not torch.float32):
        for variant in c.variants:
            fn = VARIANTS[variant](c.fn)
            want = _run(fn, x, w, train)
            # One convolution and the op: a region the plan would leave in
            # NCHW (Note [Layout regions pay for their copies]).
            options = {"strict": True, "channels_last_everywhere": True}
            compiled = torch.compile(fn, backend="mybackend", fullgraph=True, options=options)
            got, records = compiled_records(lambda compiled=compiled: _run(compiled, x, w, train))
            REACHED[op] = REACHED.get(op, False) or op in _graph_ops(records)
            try:
                # Note [Layout contracts]: of a permuted view, no copy gives a
                # storage-addressing op its traced storage; the plan stands down.
                if not (addresses_storage and variant == "permuted"):
                    _assert_planned(records, train)
                _compare(got, want, dtype)
            except AssertionError as error:
                raise AssertionError(f"{op}, {variant} layout: {error}") from error


def test_every_op_with_a_contract_is_swept_or_excluded() -> None:
    """A new op in the registry needs a case here, or a reason in EXCLUDED."""
    contracts = _C.layout_contracts()
    any_strides = {op for op, contract in contracts.items() if contract == "any"}
    assert not CASES.keys() & EXCLUDED.keys(), sorted(CASES.keys() & EXCLUDED.keys())
    unknown = sorted((CASES.keys() | EXCLUDED.keys()) - contracts.keys())
    assert not unknown, f"no longer in _C.layout_contracts(): {unknown}"
    missing = sorted(any_strides - CASES.keys() - EXCLUDED.keys())
    assert not missing, (
        f"ops with an 'any' contract and no case in CASES nor reason in EXCLUDED: {missing}"
    )
