"""``roll`` as concatenations of slices.

Note [Rolls as concatenations]
Rolling dim d of size n by s is the concatenation of the last s elements
and the first n - s along d: ``cat([x[n-s:], x[:n-s]], d)``; a roll over
several dims nests one such concatenation per dim, so that each of the
2^k pieces is one slice of x. Core ATen's decomposition is an
``index_select`` over a computed index (slow gathers: Note [Rolls stay
whole] in decompositions.py kept the op whole for that), and ATen's roll
kernel rolls a second dim by calling itself on its own output: Swin-T's
shifted windows at batch 32 ran 20 ``roll_cuda_kernel`` launches a step, 382
us of a 3.25 ms step on an H200 (2026-11-29), where reading and writing each
rolled tensor once takes 36 us. As concatenations the pointwise planner
takes them (Note [Concatenations in pointwise kernels] in
src_cpp/fusion/pointwise_planner.h): the inner concatenations compute the
outer one's pieces, so a roll is one generated kernel that reads each
element of x once through the pieces' guards, and an elementwise reader of
the rolled tensor (the residual add after a window merge) takes it in.

Its gradient is a roll by the opposite shifts (aot_autograd differentiates
``roll`` before this decomposition runs), so the backward gets the same.
The decomposition declines (the op stays whole, an ATen call) when a rolled
dim's size is symbolic: a concatenation's pieces need static sizes along
its dim, which are the kernel's bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def _static_shifts(
    x: torch.Tensor, shifts: Sequence[Any], dims: Sequence[int]
) -> dict[int, int] | None:
    """Each rolled dim's net shift in [0, size), or None where a size or
    shift is symbolic or a dim out of range; dims rolled by a multiple of
    their size are left out."""
    net: dict[int, int] = {}
    for shift, dim in zip(shifts, dims, strict=True):
        if not -x.dim() <= dim < x.dim():
            return None  # ATen's roll names the bad dim
        d = dim % x.dim()
        size = x.shape[d]
        if not isinstance(size, int) or not isinstance(shift, int):
            return None
        if size > 0:
            net[d] = (net.get(d, 0) + shift) % size
    return {d: s for d, s in net.items() if s != 0}


def _rolled(x: torch.Tensor, shifts: list[tuple[int, int]]) -> torch.Tensor:
    if not shifts:
        return x
    (dim, shift), rest = shifts[0], shifts[1:]
    size = x.shape[dim]
    tail = aten.slice.Tensor(x, dim, size - shift, size)
    head = aten.slice.Tensor(x, dim, 0, size - shift)
    return aten.cat.default([_rolled(tail, rest), _rolled(head, rest)], dim)


def roll_as_concatenation(
    x: torch.Tensor, shifts: Sequence[Any], dims: Sequence[int] = ()
) -> torch.Tensor:
    """``aten.roll`` as nested ``cat``s of ``slice``s (Note [Rolls as
    concatenations]), or NotImplemented (kept whole) for a roll of the
    flattened tensor, symbolic sizes or shifts, or bad arguments, which
    ATen's kernel reports."""
    if len(dims) == 0 or len(shifts) != len(dims) or x.dim() == 0 or x.numel() == 0:
        return NotImplemented
    net = _static_shifts(x, shifts, dims)
    if net is None:
        return NotImplemented
    if not net:
        return aten.clone.default(x)
    return _rolled(x, sorted(net.items()))
