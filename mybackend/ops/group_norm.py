"""Group norm as a statistics kernel and elementwise ops, in either layout.

Note [Group-norm statistics]
ATen's CUDA group norm takes contiguous (NCHW) input only, and its
statistics kernel gives a block to each (sample, group): at batch 1 a
UNet's 32 groups are 32 blocks on a 132-SM GPU. On the zoo's UNet (256x256,
batch 1, bf16, H200, CUDA graphs) its 14 group norms' statistics took 472
of 1666 us, and since they wanted NCHW, every convolution ran in NCHW,
cuDNN transposing each input to NHWC and back (246 us more); Inductor,
which computes group norm as reductions in any layout, ran the whole model
in 615 us.

So, for CUDA inputs, the decomposition table rewrites
``native_group_norm(x, weight, bias, N, C, HxW, G, eps)`` as

* ``mybackend::group_norm_stats(x, G, eps)``: per (sample, group) the mean
  and 1/sqrt(var + eps) (biased variance) in x's dtype, [N, G], as ATen saves
  them for the backward, and the same two in fp32 repeated per channel,
  [N, C], for the elementwise part. One read of x; the C++ core generates
  it for channels-last and contiguous x alike (Note [Group-norm units] in
  src_cpp/codegen/device/mb_group_norm.cuh), in chunks over many blocks;
* ``y = (x - mean) * rstd * weight + bias`` in fp32, elementwise over x's
  shape with per-(sample, channel) and per-channel operands, so the
  pointwise planner fuses it with the SiLU (or residual add) after it, in
  whatever layout x has.

The op's layout contract is "any", so the channels-last plan no longer
pays copies around group norms (Note [Layout regions pay for their
copies]), and a UNet's convolutions stay channels-last. The backward is
core ATen's decomposition of ``native_group_norm_backward`` (sums and
elementwise ops), which reads the [N, G] statistics as it did.

Where the core cannot run the kernel (another layout, fp64, no CUDA), the
op's ATen implementation below runs; on the CPU the table keeps ATen's
group norm whole (Note [Eager's kernels on the CPU] in decompositions.py).

Note [Group-norm statistics in every mode]
The rewrite applies with and without CUDA graphs. It was first kept to
CUDA graphs: the eager floor then timed the compiled graph against the
decomposed ATen graph, where a rewritten group norm is its ATen
implementation and five elementwise ATen kernels instead of eager's one,
and that reference lost to a compiled graph that itself lost to eager
(the zoo's UNet at 0.66x eager, H100). The floor now times the user's graph
(Note [Eager is the floor]), and on an H200 (2026-11-28, batch 1) the UNet
without CUDA graphs ran 1.16x eager with the rewrite against 1.04x without.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from mybackend.ops import batch_norm

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@torch.library.custom_op("mybackend::group_norm_stats", mutates_args=())
def group_norm_stats(x: Tensor, groups: int, eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Mean and 1/sqrt(var + eps) of x [N, C, ...] per (sample, group): in
    x's dtype as [N, groups], and in fp32 per channel as [N, C]."""
    batch, channels = x.shape[0], x.shape[1]
    per_group = channels // groups
    values = per_group * math.prod(x.shape[2:])  # explicit: -1 is ambiguous for an empty batch
    var, mean = torch.var_mean(x.reshape(batch, groups, values).float(), -1, correction=0)
    rstd = torch.rsqrt(var + eps)
    return (
        mean.to(x.dtype),
        rstd.to(x.dtype),
        mean.repeat_interleave(per_group, 1),
        rstd.repeat_interleave(per_group, 1),
    )


@group_norm_stats.register_fake
def _group_norm_stats_fake(
    x: Tensor, groups: int, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    saved = x.new_empty((x.shape[0], groups))
    channel = x.new_empty((x.shape[0], x.shape[1]), dtype=torch.float32)
    return saved, torch.empty_like(saved), channel, torch.empty_like(channel)


def group_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    _batch: Any,
    _channels: Any,
    _spatial: Any,
    groups: int,
    eps: float,
) -> Any:
    """``native_group_norm`` on CUDA as ``group_norm_stats`` and elementwise
    ops (Note [Group-norm statistics]); ``NotImplemented`` (keep ATen's op)
    elsewhere."""
    if not (
        x.device.type in batch_norm.REWRITTEN_DEVICES
        and x.dtype in _DTYPES
        and x.dim() >= 2
        and isinstance(groups, int)
        and groups > 0
        # ATen's op raises the error that names the problem.
        and not (isinstance(x.shape[1], int) and x.shape[1] % groups != 0)
    ):
        return NotImplemented
    mean, rstd, channel_mean, channel_rstd = torch.ops.mybackend.group_norm_stats(
        x, groups, float(eps)
    )
    # Every operand is x's shape or broadcasts to it from [N, C, 1, ...] or
    # [1, C, 1, ...]: one generated kernel with what follows.
    per_sample = [x.shape[0], x.shape[1]] + [1] * (x.dim() - 2)
    per_channel = [1, x.shape[1]] + [1] * (x.dim() - 2)
    y = (x.float() - channel_mean.view(per_sample)) * channel_rstd.view(per_sample)
    if weight is not None:
        y = y * weight.view(per_channel).float()
    if bias is not None:
        y = y + bias.view(per_channel).float()
    return y.to(x.dtype), mean, rstd
