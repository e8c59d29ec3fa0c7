"""GPU-marked: concatenations inside generated pointwise kernels.

Note [Concatenations in pointwise kernels] (src_cpp/spec/kernel_spec.h): an
`aten::cat` joins the elementwise ops that read it, and the producers that
only its pieces read are computed in each piece's space. Each test compiles
a graph, proves the concatenation ran inside a generated kernel (the plan's
pointwise group holds the cat node, and the pointwise counter moved without
a fallback) and compares with eager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from benchmarks.common import check_accuracy
from benchmarks.models import ZOO
from benchmarks.scenarios import Task, Workload
from mybackend.reports import collecting
from tests.gpu.test_fused_reductions import _compile
from tests.gpu.test_zoo_strict import STRICT

pytestmark = [pytest.mark.gpu]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: {"rtol": 1e-5, "atol": 1e-5}, F16: {"rtol": 2e-3, "atol": 2e-3}}
TOL[BF16] = {"rtol": 1.6e-2, "atol": 1.6e-2}


def _cats_in_pointwise_kernels(compiled: Any) -> int:
    return _fused_cats(compiled.report())


def _fused_cats(report: Any) -> int:
    ops = [n["op"] for n in report["nodes"]]
    return sum(
        1
        for kernel in report["kernels"]
        if kernel["kind"] == "pointwise"
        for n in kernel["nodes"]
        if ops[n] == "aten::cat.default"
    )


def _check(fn: Callable[..., Any], *inputs: torch.Tensor, cats: int, tol: dict[str, float]) -> None:
    compiled = _compile(fn, *inputs)
    assert _cats_in_pointwise_kernels(compiled) == cats, compiled.report()["kernels"]
    got = compiled.run(list(inputs))
    torch.cuda.synchronize()
    expected = fn(*inputs)
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        torch.testing.assert_close(g, e, **tol)
    stats = compiled.stats()
    assert stats["generated_pointwise_run"] >= 1, stats
    assert stats["generated_kernel_fallbacks"] == 0, compiled.report()["kernels"]


@contextlib.contextmanager
def _no_tf32_matmuls() -> Iterator[None]:
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _partial_rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-NeoX's: the first cos.shape[-1] channels rotated, the rest passed."""
    rotary = cos.shape[-1]
    rot, passed = q[..., :rotary], q[..., rotary:]
    return torch.cat((rot * cos + _rotate_half(rot) * sin, passed), dim=-1)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(("head_dim", "rotary"), [(64, 16), (64, 64), (80, 20), (6, 2)])
def test_rotary_embedding_is_one_kernel(dtype: torch.dtype, head_dim: int, rotary: int) -> None:
    # q is a head-major view of a fused projection [B, S, 3, H, D]: strided.
    qkv = torch.randn(2, 9, 3, 4, head_dim, device="cuda", dtype=dtype)
    q = qkv[:, :, 0].transpose(1, 2)
    cos = torch.randn(9, rotary, device="cuda", dtype=dtype)
    sin = torch.randn(9, rotary, device="cuda", dtype=dtype)
    cats = 1 if rotary == head_dim else 2
    fn = _partial_rotary if rotary < head_dim else (lambda q, c, s: q * c + _rotate_half(q) * s)
    _check(fn, q, cos, sin, cats=cats, tol=TOL[dtype])


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [F16, F32])
def test_channel_concatenation_joins_its_reader(channels_last: bool, dtype: torch.dtype) -> None:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    pieces = [
        torch.randn(2, c, 7, 5, device="cuda", dtype=dtype).to(memory_format=fmt)
        for c in (16, 0, 24, 3)  # an empty piece, and a boundary inside a vector
    ]

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.cat((a, b, c, d), dim=1) * 2)

    _check(fn, *pieces, cats=1, tol=TOL[dtype])


def test_boundaries_inside_a_vector() -> None:
    # Pieces of 3 and 5 along a last dim of 8: every 16-byte vector of the
    # output straddles the boundary (the guarded loads' partial masks).
    a = torch.randn(64, 3, device="cuda", dtype=F16)
    b = torch.randn(64, 5, device="cuda", dtype=F16)
    _check(lambda a, b: torch.cat((a * 3, b), dim=1).sigmoid(), a, b, cats=1, tol=TOL[F16])


def test_pieces_of_other_dtypes_are_promoted() -> None:
    a = torch.randn(4, 6, device="cuda", dtype=F16)
    b = torch.randn(4, 2, device="cuda", dtype=F32)
    _check(lambda a, b: torch.cat((a, b), dim=1) + 1, a, b, cats=1, tol=TOL[F16])


def test_nested_concatenations_along_two_dims() -> None:
    a = torch.randn(3, 4, device="cuda")
    b = torch.randn(3, 5, device="cuda")
    c = torch.randn(2, 9, device="cuda")
    w = torch.randn(9, device="cuda")

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.cat((torch.cat((a.exp(), b), dim=1), c), dim=0) * w

    _check(fn, a, b, c, w, cats=2, tol=TOL[F32])


def test_a_concatenation_broadcast_into_a_larger_walk() -> None:
    # The cat's result [1, 8] broadcasts over rows: the walk's dim 1 is the
    # concatenation's, dim 0 is not.
    a = torch.randn(1, 3, device="cuda")
    b = torch.randn(1, 5, device="cuda")
    x = torch.randn(6, 8, device="cuda")
    _check(lambda a, b, x: x * torch.cat((a, b), dim=1) - 1, a, b, x, cats=1, tol=TOL[F32])


def test_rotary_training_step_matches_eager() -> None:
    """Forward and backward through torch.compile: the gradient of a
    concatenation is slices, of the slices a concatenation again."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 9, 32, device="cuda", requires_grad=True)
    cos = torch.randn(9, 16, device="cuda")
    sin = torch.randn(9, 16, device="cuda")

    def step(q: torch.Tensor) -> torch.Tensor:
        return (_partial_rotary(q, cos, sin) * 1.5).sum()

    compiled = torch.compile(step, backend="mybackend", options={"strict": True})
    q_ref = q.detach().clone().requires_grad_(True)
    with collecting() as records:
        loss = compiled(q)
        loss.backward()
    # Forward: rotate_half's and the halves'; backward: the gradient's.
    fused = [_fused_cats(r.core_report) for r in records if r.core_report is not None]
    assert len(fused) == 2 and fused[0] == 2 and fused[1] >= 1, fused
    loss_ref = step(q_ref)
    loss_ref.backward()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(q.grad, q_ref.grad, rtol=1e-5, atol=1e-5)


def test_dynamic_batch_keeps_the_concatenation_fused() -> None:
    """Symbolic sizes on the other dims are fine; the pieces' sizes along the
    concatenated dim are static."""
    cos = torch.randn(16, device="cuda")
    sin = torch.randn(16, device="cuda")

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * cos + _rotate_half(x) * sin

    compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
    with collecting() as records:
        for rows in (5, 12, 33):
            x = torch.randn(rows, 3, 16, device="cuda")
            torch._dynamo.mark_dynamic(x, 0)  # the head dim stays static
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    fused = [_fused_cats(r.core_report) for r in records if r.core_report is not None]
    assert fused == [1], fused


@pytest.mark.parametrize(
    ("name", "scenario", "fused"),
    [
        ("googlenet", "inference", True),
        ("googlenet", "training", True),
        ("densenet121", "inference", True),
        # Each concatenation feeds a batch norm's statistics: ATen's copy.
        ("densenet121", "training", False),
    ],
)
def test_channel_concatenation_nets_match_eager_in_fp32(
    name: str, scenario: str, fused: bool
) -> None:
    """Whole nets whose blocks end in channel concatenations, in strict mode
    and fp32 without TF32, where the harness's check is sharp: bf16 gradients
    of the tiny variants, and fp32 ones through TF32 convolutions, are too
    noisy to tell a wrong kernel from rounding (googlenet's training check
    failed under TF32 with concatenations fused or not, 2026-11-29)."""
    batch = 2 if scenario == "inference" else ZOO[name].tiny_train_batch
    task = Task(Workload(name, scenario, batch, device="cuda", dtype="float32", tiny=True))
    with (
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False),
        _no_tf32_matmuls(),
        collecting() as records,
    ):
        runner = task.runner(STRICT)
        runner.first()
        outputs = [t.cpu() for t in runner.check()]
    accuracy = check_accuracy(outputs, task.eager, task.reference, task.workload.tolerance)
    assert accuracy.passed, f"{name} {scenario}: {accuracy.reason} (cosine {accuracy.cosine})"
    fused_cats = sum(_fused_cats(r.core_report) for r in records if r.core_report is not None)
    assert (fused_cats > 0) == fused, fused_cats
