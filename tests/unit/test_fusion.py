"""Stage 7: the fusion planner, on ATen graphs traced with fake CUDA tensors.

FakeTensorMode makes CUDA tensors without a GPU, so the planner's CUDA path
(generated pointwise groups) is tested on CPU machines; compiling the plan
runs NVRTC, which needs no GPU either (the kernels load on first run only).
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from tests.testing import wait_until


def _kernels(
    fn: Callable[..., Any], *specs: tuple[tuple[int, ...], torch.dtype], device: str = "cuda"
) -> list[dict[str, Any]]:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        inputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    lowered = lower(gm, [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    return list(compiled.report()["kernels"])


def _ops(fn: Callable[..., Any], *specs: tuple[tuple[int, ...], torch.dtype]) -> list[str]:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        inputs = [torch.empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    lowered = lower(gm, [])
    return [n["op"] for n in _C.compile(lowered.graph, {}, None).report()["nodes"]]


F32 = torch.float32


def test_elementwise_chain_is_one_generated_kernel() -> None:
    kernels = _kernels(lambda x, b: torch.relu(x * 2 + b).sigmoid(), ((4, 8), F32), ((8,), F32))
    assert [k["kind"] for k in kernels] == ["pointwise"]
    assert kernels[0]["nodes"] == [0, 1, 2, 3]
    assert "fused 4 elementwise ops" in kernels[0]["why"]
    if "spec" in kernels[0]:  # once the binding carries the spec text
        assert "relu" in kernels[0]["spec"] and "sigmoid" in kernels[0]["spec"]


def test_cpu_partitions_are_unchanged() -> None:
    kernels = _kernels(lambda x: torch.relu(x * 2).exp(), ((4, 8), F32), device="cpu")
    assert [k["kind"] for k in kernels] == ["aten_sequence"]
    assert kernels[0]["nodes"] == [0, 1, 2]


def _softmax_like(x: torch.Tensor) -> torch.Tensor:
    y = x * 3
    z = (y - y.amax(-1, keepdim=True)).exp()
    return z / z.sum(-1, keepdim=True)


def test_row_reductions_take_their_rows_readers() -> None:
    """Note [Row epilogues in the graph]: the max's kernel computes y, the max
    and z = exp(y - max) (y recomputed in both passes), the sum's kernel z's
    sum and z / sum; nothing else runs."""
    kernels = _kernels(_softmax_like, ((4, 16), F32))
    assert [k["kind"] for k in kernels] == ["reduction", "reduction"], kernels
    assert all("row epilogue" in k["spec"] for k in kernels), kernels
    ops = _ops(_softmax_like, ((4, 16), F32))
    taken = [[ops[n] for n in k["nodes"]] for k in kernels]
    assert taken == [
        ["aten::mul.Tensor", "aten::amax.default", "aten::sub.Tensor", "aten::exp.default"],
        ["aten::sum.dim_IntList", "aten::div.Tensor"],
    ], taken
    covered = sorted(n for k in kernels for n in k["nodes"])
    assert covered == list(range(len(ops)))


def test_reduction_splits_elementwise_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYBACKEND_ROW_EPILOGUES", "0")
    kernels = _kernels(_softmax_like, ((4, 16), F32))
    kinds = [k["kind"] for k in kernels]
    # y alone is one op (ATen's); sub+exp fuse; the sums are ATen calls; div
    # alone broadcasts the sum, so it is generated too (Note [Lone
    # broadcasting ops]).
    assert kinds.count("pointwise") == 2, kernels
    ops = _ops(_softmax_like, ((4, 16), F32))
    fused = [[ops[n] for n in k["nodes"]] for k in kernels if k["kind"] == "pointwise"]
    assert fused == [["aten::sub.Tensor", "aten::exp.default"], ["aten::div.Tensor"]], fused
    covered = sorted(n for k in kernels for n in k["nodes"])
    assert covered == list(range(len(ops)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_mixed_dtype_chain_fuses(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.gelu(x, approximate="tanh") * y).to(torch.float32) + 1

    kernels = _kernels(fn, ((3, 5), dtype), ((5,), F32))
    assert [k["kind"] for k in kernels] == ["pointwise"]


def test_comparisons_and_where_fuse() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0.5, x, y * 2).clamp(min=-1.0)

    kernels = _kernels(fn, ((7,), F32), ((7,), F32))
    assert [k["kind"] for k in kernels] == ["pointwise"]


def test_multiple_outputs() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.exp()
        return y, y.neg().relu()

    kernels = _kernels(fn, ((9,), F32))
    assert [k["kind"] for k in kernels] == ["pointwise"]
    assert "2 outputs" in kernels[0]["why"]


def test_kernel_cache_counts_hits_and_explain_reports_them() -> None:
    from mybackend.explain import ExplainReport

    def chain(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 3 - 1).exp()

    before = _C.kernel_cache_stats()
    _kernels(chain, ((16, 8), F32))  # compiles (or finds) the kernel
    middle = _C.kernel_cache_stats()
    _kernels(chain, ((16, 8), F32))  # the same source again: a memory hit
    after = _C.kernel_cache_stats()
    assert sum(middle[k] - before[k] for k in ("memory_hits", "disk_hits", "compiles")) >= 1
    assert after["memory_hits"] > middle["memory_hits"]
    assert after["compiles"] == middle["compiles"]
    delta = {k: after[k] - middle[k] for k in after}
    text = str(ExplainReport([], kernel_cache=delta))
    assert f"kernel cache: {delta['memory_hits']} memory hit(s)" in text
    assert ExplainReport([], kernel_cache=delta).to_dict()["kernel_cache"] == delta
    compiled = {"compiles": 2, "compile_us": 1_500_000, "batch_wall_us": 800_000}
    text = str(ExplainReport([], kernel_cache=compiled))
    assert "2 compile(s) (1.50 s of NVRTC over threads, in 0.80 s)" in text


def test_a_general_variant_is_compiled_on_first_use_only() -> None:
    # Note [Variants compiled on first use]: of a group's two variants only
    # the fast one is compiled (or read from a cache) with the graph.
    def chain(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 1.75 + 0.5).neg()

    before = _C.kernel_cache_stats()
    kernels = _kernels(chain, ((32, 8), F32))
    after = _C.kernel_cache_stats()
    assert "(general)" in kernels[0]["kernel"], kernels[0]
    assert sum(after[k] - before[k] for k in ("memory_hits", "disk_hits", "compiles")) == 1
    assert after["batch_wall_us"] > before["batch_wall_us"]
    if after["compiles"] > before["compiles"]:
        assert after["compile_us"] > before["compile_us"]


def test_kernels_compile_beside_the_caller() -> None:
    # Note [Kernels compiled beside the caller]: compile() returns while NVRTC
    # is still at work; the first report (or run) waits for the batch. A
    # scale no earlier compile used makes a source no cache holds.
    scale = 1.0 + random.random()

    def chain(x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x * scale + 0.25).abs()

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty((64, 8), device="cuda")
    lowered = lower(make_fx(chain, tracing_mode="fake")(x), [])
    options = {"generated_kernels": True, "kernel_cache_dir": ""}  # memory only
    before = _C.kernel_cache_stats()
    compiled = _C.compile(lowered.graph, options, lowered.run_python_node)
    kernels = compiled.report()["kernels"]
    after = _C.kernel_cache_stats()
    assert kernels[0]["compiled"], kernels[0]
    assert after["compiles"] == before["compiles"] + 1
    assert after["wait_us"] > before["wait_us"]
    _C.wait_for_background_compiles()  # nothing left to wait for: returns


def test_a_child_forked_during_a_compile_waits_for_none() -> None:
    # Note [Kernels compiled beside the caller]: the batch's thread exists
    # only in the parent; a child must neither hang at exit nor on a report.
    scale = 1.0 + random.random()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty((64, 8), device="cuda")
    lowered = lower(make_fx(lambda x: torch.tan(x * scale), tracing_mode="fake")(x), [])
    options = {"generated_kernels": True, "kernel_cache_dir": ""}
    compiled = _C.compile(lowered.graph, options, lowered.run_python_node)
    pid = os.fork()
    if pid == 0:  # the child: exits with 0 only if neither call hangs or raises
        try:
            _C.wait_for_background_compiles()
            kernel = compiled.report()["kernels"][0]
            ok = kernel["compiled"] or "forked" in kernel["problem"]
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    exited: list[int] = []

    def child_exited() -> bool:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited.append(status)
        return bool(done)

    try:
        wait_until(child_exited, "the forked child's exit", poll_s=0.05)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    assert os.waitstatus_to_exitcode(exited[0]) == 0
    assert compiled.report()["kernels"][0]["compiled"]  # the parent's batch finished


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("MYBACKEND_GENERATED_KERNELS", "0", "switched off by MYBACKEND_GENERATED_KERNELS"),
        ("MYBACKEND_NVRTC_TARGET", "sm_9999", "NVRTC failed"),
    ],
)
def test_a_kernel_that_does_not_compile_is_reported_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    monkeypatch.setenv(variable, value)
    kernels = _kernels(lambda x: torch.sin(x * 2.5) + 1, ((16, 4), F32))
    assert kernels[0]["kind"] == "pointwise"
    assert not kernels[0]["compiled"]
    assert reason in kernels[0]["problem"], kernels[0]["problem"]


def test_report_carries_the_generated_cuda_source() -> None:
    kernels = _kernels(lambda x: torch.sigmoid(x * 2 + 1), ((4, 8), F32))
    pointwise = [k for k in kernels if k["kind"] == "pointwise"]
    assert pointwise, kernels
    assert "__global__" in pointwise[0]["source"]
    assert all(k["source"] == "" for k in kernels if k["kind"] != "pointwise")


@pytest.mark.parametrize(
    ("exponent", "expected", "absent"),
    [
        (3.0, "mul", "pow"),  # GPT-2's GELU: x * x * x, as eager's kernel
        (2, "mul", "pow"),
        (0.5, "sqrt", "pow"),
        (-0.5, "rsqrt", "pow"),
        (-1.0, "reciprocal", "pow"),
        (-2.0, "reciprocal", "pow"),
        (2.5, "pow", "sqrt"),
    ],
)
def test_pow_by_a_constant_is_strength_reduced_like_eager(
    exponent: float, expected: str, absent: str
) -> None:
    kernels = _kernels(lambda x: (x * 2).pow(exponent), ((4, 8), torch.bfloat16))
    spec = kernels[0]["spec"]
    assert f"{expected} %" in spec and f"{absent} %" not in spec, spec


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_truncating_division_rounds_the_quotient_like_eager(dtype: torch.dtype) -> None:
    # Eager's 16-bit kernel rounds a / b to the 16-bit type before truncating.
    kernels = _kernels(
        lambda a, b: torch.div(a * 2, b, rounding_mode="trunc"), ((4, 8), dtype), ((8,), dtype)
    )
    spec = kernels[0]["spec"]
    rounds_first = "div_trunc" not in spec and "trunc" in spec
    assert rounds_first == (dtype != torch.float32), spec


def test_channels_last_groups_walk_memory_order() -> None:
    """Note [Iteration order]: the channels-last operands are flat (aligned),
    the per-channel broadcast repeats every 8 elements in memory order (Note
    [Periodic operands]); an NCHW group walks logically, where the
    per-channel operand keeps strides."""

    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.float() * s + s).to(torch.bfloat16)

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    for layout, walked in ((torch.channels_last, True), (torch.contiguous_format, False)):
        with mode:
            x = torch.empty(2, 8, 5, 6, dtype=torch.bfloat16, device="cuda")
            x = x.contiguous(memory_format=layout)
            s = torch.empty(1, 8, 1, 1, device="cuda")
        lowered = lower(make_fx(fn, tracing_mode="fake")(x, s), [])
        compiled = _C.compile(lowered.graph, {"generated_kernels": True}, None)
        (kernel,) = compiled.report()["kernels"]
        assert ("walked in memory order" in kernel["why"]) == walked, kernel["why"]
        assert "in0 bf16 aligned" in kernel["spec"] and "out0 bf16 aligned" in kernel["spec"]
        per_channel = "in1 f32 periodic\n" if walked else "in1 f32 strided rank=4"
        assert per_channel in kernel["spec"], kernel["spec"]


@pytest.mark.parametrize(
    ("other_shape", "mode"),
    [
        ((1, 8, 1, 1), "periodic\n"),
        ((2, 8, 1, 1), "periodic_rows"),
        ((2, 1, 5, 6), "strided rank=4"),
    ],
    ids=["per_channel", "se_gate", "per_pixel"],
)
def test_operands_repeating_along_the_walk_are_periodic(
    other_shape: tuple[int, ...], mode: str
) -> None:
    """Note [Periodic operands]: over a channels-last walk a per-channel
    operand repeats over the whole walk, a gate per image and channel within
    each image (rows); a per-pixel operand does not repeat."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(2, 8, 5, 6, dtype=torch.bfloat16, device="cuda")
        x = x.contiguous(memory_format=torch.channels_last)
        other = torch.empty(other_shape, device="cuda")
    fn = lambda x, o: torch.relu(x.float() * o).to(torch.bfloat16)  # noqa: E731
    lowered = lower(make_fx(fn, tracing_mode="fake")(x, other), [])
    (kernel,) = _C.compile(lowered.graph, {"generated_kernels": True}, None).report()["kernels"]
    assert f"in1 f32 {mode}" in kernel["spec"], kernel["spec"]


@pytest.mark.parametrize(
    ("source", "target"), [(torch.bfloat16, F32), (F32, torch.bfloat16), (torch.float16, F32)]
)
def test_a_lone_dtype_cast_is_generated(source: torch.dtype, target: torch.dtype) -> None:
    """Note [Lone casts]: ATen casts without vectors, so a lone cast becomes a
    generated kernel, read and written as 16-byte vectors; other lone
    elementwise ops (and a cast to the same dtype) stay ATen calls."""
    (kernel,) = _kernels(lambda x: x.to(target), ((64, 48), source))
    assert kernel["kind"] == "pointwise", kernel
    assert f"in0 {_short(source)} aligned" in kernel["spec"], kernel["spec"]
    assert f"out0 {_short(target)} aligned" in kernel["spec"], kernel["spec"]
    # A transposed gradient (t of a product) is cast in its memory order.
    kernels = _kernels(lambda x: x.t().to(target), ((64, 48), source))
    assert [k["kind"] for k in kernels].count("pointwise") == 1, kernels
    for fn in (torch.exp, lambda x: x.to(source, copy=True)):
        assert [k["kind"] for k in _kernels(fn, ((64, 48), source))] == ["aten_sequence"]


def _short(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "f16", F32: "f32"}[dtype]


def test_independent_casts_share_one_kernel() -> None:
    """Note [Grouped casts]: lone casts that do not read each other's results
    are one multi-tensor kernel; the report and the dumps show it as its own
    kind."""
    from mybackend.reports import format_kernels

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a.to(torch.bfloat16), b.to(torch.float16), c.to(torch.bfloat16)

    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(shape, device="cuda") for shape in ((7,), (64, 33), (2, 3, 5))]
    lowered = lower(make_fx(fn, tracing_mode="fake")(*inputs), [])
    report = _C.compile(lowered.graph, {"generated_kernels": True}, None).report()
    assert [k["kind"] for k in report["kernels"]] == ["cast_group"], report["kernels"]
    (group,) = report["kernels"]
    assert group["nodes"] == [0, 1, 2]
    assert group["spec"].startswith("cast_group pairs=f32->bf16,f32->f16 "), group["spec"]
    assert "grouped 3 independent dtype casts" in group["why"]
    assert group["compiled"] is True, group["problem"]
    assert group["kernel"].startswith("cast_group: mb_cast_group_"), group["kernel"]
    assert "mb::cast_chunk<float, mb::f16, PER_THREAD>" in group["source"]
    assert "partition 0 -> cast_group" in format_kernels(report)
    # A cast of a cast's result waits for the first: two lone casts.
    kernels = _kernels(lambda a: a.to(torch.bfloat16).flip(0).to(F32), ((16,), F32))
    assert "cast_group" not in [k["kind"] for k in kernels], kernels


def _cast_to_channels_last(*weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Autocast's weight casts with the channels-last plan's layout copies."""
    return tuple(w.to(torch.bfloat16).clone(memory_format=torch.channels_last) for w in weights)


def test_weight_casts_with_layout_copies_share_one_kernel() -> None:
    """Note [Copies beside a cast]: 1x1 weights list their elements in the
    same order in both layouts and join the group with their copies; a 3x3
    weight's cast and copy moves elements and joins as a layout copy (Note
    [Grouped layout copies]): one kernel for all three."""
    shapes = ((64, 32, 1, 1), (16, 8, 1, 1), (16, 8, 3, 3))
    kernels = _kernels(_cast_to_channels_last, *((shape, F32) for shape in shapes))
    groups = [k for k in kernels if k["kind"] == "cast_group"]
    assert len(groups) == 1, kernels
    assert len(groups[0]["nodes"]) == 6  # three casts, three copies
    assert "Copies beside a cast" in groups[0]["why"]
    assert "1 change layout (Note [Grouped layout copies])" in groups[0]["why"]
    assert "layout_copies" in groups[0]["spec"]
    assert [k for k in kernels if k not in groups] == [], kernels


def test_autocast_forward_casts_its_parameters_in_one_kernel() -> None:
    """The fp32 parameters of an autocast forward, each cast to bf16 once,
    become one cast-group kernel instead of one launch per parameter."""
    from torch import nn

    from tests.unit.test_matmul_plan import _aot_graphs
    from tests.unit.test_matmul_plan import _kernels as _graph_kernels

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(8, 32)
            self.down = nn.Linear(32, 8)
            self.norm = nn.LayerNorm(8)
            self.head = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.down(torch.nn.functional.gelu(self.up(x), approximate="tanh"))
                return self.head(self.norm(h + x))

    forward = _aot_graphs(Block(), torch.randn(4, 8, requires_grad=True))["forward"]
    input_casts = [
        n
        for n in forward.graph.nodes
        if n.target
        in (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)
        and n.args[0].op == "placeholder"
    ]
    assert len(input_casts) == 7  # 3 weights, 3 biases, x
    kernels, ops = _graph_kernels(forward, generated_kernels=True)
    groups = [k for k in kernels if k["kind"] == "cast_group"]
    assert len(groups) == 1, kernels
    assert len(groups[0]["nodes"]) == len(input_casts), groups[0]
    assert {ops[n] for n in groups[0]["nodes"]} <= {
        "aten::_to_copy.default",
        "prims::convert_element_type.default",
    }
    lone_casts = [k for k in kernels if k["kind"] == "pointwise" and len(k["nodes"]) == 1]
    assert lone_casts == [], lone_casts


def test_a_broadcast_producer_joins_its_readers_kernel() -> None:
    """Note [Broadcast producers inlined]: a squeeze-excitation gate, the
    sigmoid over [N, C, 1, 1] read only by the multiply over [N, C, H, W],
    runs inside the multiply's kernel, computed per element."""
    kernels = _kernels(
        lambda x, s, b: F.silu(x) * torch.sigmoid(s + b),
        ((2, 16, 5, 5), F32),
        ((2, 16, 1, 1), F32),
        ((16, 1, 1), F32),
    )
    assert [k["kind"] for k in kernels] == ["pointwise"], kernels
    assert len(kernels[0]["nodes"]) == 4


def test_a_broadcast_producer_read_elsewhere_stays_apart() -> None:
    """Its value is stored for another reader: inlined it would be stored in
    the larger space, so it keeps its own kernel (here, alone, ATen)."""

    def gate_returned(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate = torch.sigmoid(s)
        return x * gate, gate

    kernels = _kernels(gate_returned, ((2, 16, 5, 5), F32), ((2, 16, 1, 1), F32))
    # The sigmoid alone is ATen's; the multiply broadcasts the gate, so it is
    # generated, alone (Note [Lone broadcasting ops]).
    groups = [k["nodes"] for k in kernels if k["kind"] == "pointwise"]
    assert groups == [[1]], kernels


def test_a_long_broadcast_chain_is_not_recomputed_per_element() -> None:
    """More than kMaxInlinedNodes ops over the small shape keep their own
    kernel: each would run once per element of the larger space."""

    def chain(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(torch.exp(torch.tanh(torch.sin(torch.cos(s)))))

    kernels = _kernels(chain, ((2, 16, 5, 5), F32), ((2, 16, 1, 1), F32))
    groups = sorted(len(k["nodes"]) for k in kernels if k["kind"] == "pointwise")
    # The chain, and the multiply alone (it broadcasts: Note [Lone
    # broadcasting ops]).
    assert groups == [1, 5], kernels
