"""GPU-marked: generated pointwise kernels (CUDA engine I) against eager.

Each test compiles an elementwise graph whose plan has pointwise groups,
runs it on the GPU and compares with eager; the profiler (and, where the
binding exposes it, the generated_kernels_run counter) shows that the
generated kernels ran rather than the ATen fallback.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from tests.testing import compiled_records
from tests.unit.test_ops_roll import CASES as ROLL_CASES

pytestmark = [
    pytest.mark.gpu,
]


TOL = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2},
}


def _generated_kernels_launched(fn: Callable[[], Any]) -> tuple[Any, int]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    return result, sum(name.startswith("mb_pointwise_") for name in names)


def _compile(fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    lowered = lower(make_fx(fn, tracing_mode="fake")(*inputs), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def _check(
    fn: Callable[..., Any],
    *inputs: torch.Tensor,
    tol: dict[str, float],
    reference: Callable[..., Any] | None = None,
) -> Any:
    """reference: what the kernel should compute (default fn itself)."""
    compiled = _compile(fn, *inputs)
    kinds = [k["kind"] for k in compiled.report()["kernels"]]
    assert "pointwise" in kinds, compiled.report()["kernels"]
    got, launched = _generated_kernels_launched(lambda: compiled.run(list(inputs)))
    expected = (reference or fn)(*inputs)
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape and g.device == e.device
        torch.testing.assert_close(g, e, **tol)
    stats = compiled.stats()
    assert stats["generated_kernels_run"] >= 1, stats
    assert launched >= 1, "no mb_pointwise kernel ran"
    return compiled


def _chain(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = F.gelu(x * 0.5 + b, approximate="tanh")
    return torch.where(y > 0.1, y.sigmoid(), -y).tanh() - 1


def _chain_in_opmath(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What a fused kernel computes: fp16/bf16 inputs read into fp32, every
    intermediate kept in fp32, one rounding at the store. Eager rounds after
    each op, so near the `y > 0.1` branch point it may take the other branch
    (as Inductor's kernels may); comparing with eager would fail by chance."""
    return _chain(x.float(), b.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape", [(4, 8), (3, 5, 7), (1, 1), (1,), (1000003,), (2, 1, 33)], ids=str
)
def test_chain_with_broadcast(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    b = torch.randn(shape[-1:], device="cuda", dtype=dtype)
    _check(_chain, x, b, tol=TOL[dtype], reference=_chain_in_opmath)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_non_contiguous_inputs(dtype: torch.dtype) -> None:
    base = torch.randn(16, 24, device="cuda", dtype=dtype)
    b = torch.randn(16, device="cuda", dtype=dtype)
    _check(_chain, base.t(), b, tol=TOL[dtype], reference=_chain_in_opmath)  # transposed
    b12 = torch.randn(12, device="cuda", dtype=dtype)
    _check(_chain, base[:, ::2], b12, tol=TOL[dtype], reference=_chain_in_opmath)
    # Traced contiguous, called with a strided view: the general variant runs.
    x = torch.randn(24, 16, device="cuda", dtype=dtype)
    compiled = _compile(_chain, x, b)
    got = compiled.run([base.t(), b])[0]
    torch.testing.assert_close(got, _chain_in_opmath(base.t(), b), **TOL[dtype])


def test_mixed_dtypes_and_casts() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = x.float() * y + i  # f16 * f32 + i32 -> f32
        return z, (z.exp() > 2).logical_and(i > 0), z.to(torch.bfloat16).relu()

    x = torch.randn(6, 10, device="cuda", dtype=torch.float16)
    y = torch.randn(10, device="cuda")
    i = torch.randint(-3, 3, (6, 10), device="cuda", dtype=torch.int32)
    _check(fn, x, y, i, tol={"rtol": 1e-5, "atol": 1e-5})


def _fetched_images(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after[k] - before[k] for k in ("memory_hits", "disk_hits", "compiles"))


def test_unaligned_inputs_take_the_safe_path() -> None:
    storage = torch.randn(4 * 64 + 1, device="cuda")
    x = storage[1:].view(4, 64)  # 4-byte aligned only
    b = torch.randn(64, device="cuda")
    compiled = _compile(_chain, torch.randn(4, 64, device="cuda"), b)
    # "pointwise: <fast> + <general> (general) for sm_90 cubin"
    description = compiled.report()["kernels"][0]["kernel"]
    assert "(general)" in description, description
    general = description.split(" + ")[1].split(" ")[0]
    before = _C.kernel_cache_stats()
    aligned = torch.randn(4, 64, device="cuda")
    torch.testing.assert_close(
        compiled.run([aligned, b])[0], _chain(aligned, b), **TOL[torch.float32]
    )
    middle = _C.kernel_cache_stats()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = compiled.run([x, b])[0]
        torch.cuda.synchronize()
    after = _C.kernel_cache_stats()
    torch.testing.assert_close(got, _chain(x, b), **TOL[torch.float32])
    assert general in [e.name for e in prof.events()]
    # Note [Variants compiled on first use]: the general variant is fetched
    # (compiled, or read from a cache) by the first call that needs it; the
    # report then says a call used it.
    assert _fetched_images(before, middle) == 0
    assert _fetched_images(middle, after) == 1
    assert "(general, used)" in compiled.report()["kernels"][0]["kernel"]


def test_groups_that_differ_in_a_scalar_share_one_program() -> None:
    """Note [Scalars as kernel arguments]: two groups, alike but for a scale
    (a batch-norm gradient's 1/count per stage), launch one program, each
    with its own value."""

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * (1 / 3136) + 1).relu(), (y * (1 / 784) + 1).relu()

    x = torch.randn(64, 128, device="cuda") * 3000
    y = torch.randn(32, 128, device="cuda") * 800  # another shape: a group of its own
    compiled = _compile(fn, x, y)
    texts = [k["kernel"] for k in compiled.report()["kernels"] if k["kind"] == "pointwise"]
    assert len(texts) == 2, compiled.report()["kernels"]
    names = [re.findall(r"mb_pointwise_[0-9a-f]+", text)[0] for text in texts]
    assert names[0] == names[1], texts
    (got_x, got_y), launched = _generated_kernels_launched(lambda: compiled.run([x, y]))
    assert launched == 2
    want_x, want_y = fn(x, y)
    torch.testing.assert_close(got_x, want_x, **TOL[torch.float32])
    torch.testing.assert_close(got_y, want_y, **TOL[torch.float32])


def test_model_runs_generated_kernels() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return F.gelu(h) * torch.sigmoid(h) + x

    model = Block().cuda().eval()
    compiled = torch.compile(
        model, backend="mybackend", options={"strict": True, "generated_kernels": True}
    )
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        expected = model(x)
        got, launched = _generated_kernels_launched(lambda: compiled(x))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert launched >= 1


def test_dynamic_batch_sizes_share_one_kernel() -> None:
    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (x * 2 + b).relu().exp()

    compiled = torch.compile(
        fn, backend="mybackend", dynamic=True, options={"strict": True, "generated_kernels": True}
    )
    b = torch.randn(16, device="cuda")
    for batch in (3, 5, 129):
        x = torch.randn(batch, 16, device="cuda")
        got, launched = _generated_kernels_launched(lambda x=x: compiled(x, b))
        torch.testing.assert_close(got, fn(x, b), rtol=1e-5, atol=1e-5)
        assert launched >= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 8, 5, 6), (3, 64, 7, 7), (1, 3, 1, 9)])
def test_channels_last_group_walks_memory_order(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Note [Iteration order]: channels-last outputs, a per-channel broadcast
    and a second, NCHW-strided operand, one kernel; results and strides as eager."""
    x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    r = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    nchw = torch.randn(shape, device="cuda", dtype=dtype)
    scale = torch.randn(1, shape[1], 1, 1, device="cuda", dtype=torch.float32)

    def fn(x: torch.Tensor, r: torch.Tensor, nchw: torch.Tensor, scale: torch.Tensor) -> Any:
        y = torch.relu(x.float() * scale + r.float()).to(dtype)
        return y, (y.float() * 2 + nchw.float()).to(dtype)

    compiled = _compile(fn, x, r, nchw, scale)
    whys = [k["why"] for k in compiled.report()["kernels"] if k["kind"] == "pointwise"]
    assert whys and all("walked in memory order" in w for w in whys), whys
    got = compiled.run([x, r, nchw, scale])
    for g, e in zip(got, fn(x, r, nchw, scale), strict=True):
        torch.testing.assert_close(g, e, **TOL[dtype])
        assert g.stride() == e.stride()


def _periodic_case(case: str, dtype: torch.dtype) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """A function with one operand that repeats along the walk, and its inputs."""
    if case == "per_channel":  # a scale beside a channels-last activation
        x = torch.randn(2, 64, 7, 7, device="cuda", dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        other = torch.randn(1, 64, 1, 1, device="cuda")
    elif case == "se_gate":  # a gate per image and channel, over channels-last
        x = torch.randn(2, 64, 7, 7, device="cuda", dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        other = torch.randn(2, 64, 1, 1, device="cuda")
    elif case == "row_bias":
        x = torch.randn(6, 40, device="cuda", dtype=dtype)
        other = torch.randn(40, device="cuda")
    else:  # "table_over_batch": a [S, H] table added to every batch row
        x = torch.randn(3, 5, 16, device="cuda", dtype=dtype)
        other = torch.randn(5, 16, device="cuda")

    def fn(x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.float() * other + 0.5).to(x.dtype)

    return fn, [x, other]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["per_channel", "se_gate", "row_bias", "table_over_batch"])
def test_periodic_operands(case: str, dtype: torch.dtype) -> None:
    """Note [Periodic operands]: an operand repeating along the walk is read at
    i mod period; a call whose operand is not 16-byte aligned runs the
    general variant, with the same results."""
    fn, (x, other) = _periodic_case(case, dtype)
    compiled = _check(fn, x, other, tol=TOL[dtype])
    kernel = next(k for k in compiled.report()["kernels"] if k["kind"] == "pointwise")
    mode = "periodic_rows" if case == "se_gate" else "periodic\n"
    assert f"in1 f32 {mode}" in kernel["spec"], kernel["spec"]
    assert "(general)" in kernel["kernel"], kernel["kernel"]  # not run yet
    storage = torch.randn(other.numel() + 1, device="cuda")
    unaligned = storage[1:].view(other.shape)
    got = compiled.run([x, unaligned])[0]
    torch.testing.assert_close(got, fn(x, unaligned), **TOL[dtype])
    # The profiler's kernel names are not a witness: a module whose code
    # another test loaded first may be reported under that kernel's name.
    kernel = next(k for k in compiled.report()["kernels"] if k["kind"] == "pointwise")
    assert "(general, used)" in kernel["kernel"], kernel["kernel"]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float16, torch.float32),
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "odd"])
def test_a_lone_cast_runs_generated(source: torch.dtype, target: torch.dtype, layout: str) -> None:
    """Note [Lone casts]: a parameter gradient's cast to fp32 (or a weight's
    to bf16) is one generated kernel, exact like eager's copy."""
    shape = (33, 17) if layout == "odd" else (768, 3072)
    x = torch.randn(shape, device="cuda").to(source)
    if layout == "transposed":
        _check(lambda x: x.t().to(target), x, tol={"rtol": 0, "atol": 0})
    else:
        _check(lambda x: x.to(target), x, tol={"rtol": 0, "atol": 0})


def _gate(x: torch.Tensor, s: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(x) * torch.sigmoid(s + b)


def _gate_in_opmath(x: torch.Tensor, s: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _gate(x.float(), s.float(), b.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_a_broadcast_gate_computed_inside_its_readers_kernel(
    dtype: torch.dtype, channels_last: bool
) -> None:
    """Note [Broadcast producers inlined]: the squeeze-excitation gate over
    [N, C, 1, 1] runs inside the multiply's kernel, one kernel in all."""
    x = torch.randn(2, 40, 14, 14, device="cuda", dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    s = torch.randn(2, 40, 1, 1, device="cuda", dtype=dtype)
    b = torch.randn(40, 1, 1, device="cuda", dtype=dtype)
    compiled = _check(_gate, x, s, b, tol=TOL[dtype], reference=_gate_in_opmath)
    assert [k["kind"] for k in compiled.report()["kernels"]] == ["pointwise"]


def _window_partition(x: torch.Tensor) -> torch.Tensor:
    b, h, w, c = x.shape
    return x.view(b, h // 7, 7, w // 7, 7, c).permute(0, 1, 3, 2, 4, 5).contiguous()


def _head_split_transposed(x: torch.Tensor) -> torch.Tensor:
    return x.view(4, 49, 3, 32).permute(0, 2, 3, 1).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_window_partition_copy_is_one_generated_kernel(dtype: torch.dtype) -> None:
    """Note [Lone reordering copies]: Swin's window partition, C innermost on
    both sides, is a generated copy moving vectors; a copy that transposes
    the innermost dim is a tiled copy instead (Note [Tiled transposing
    copies])."""
    x = torch.randn(2, 14, 21, 96, device="cuda", dtype=dtype)
    compiled = _check(_window_partition, x, tol={"rtol": 0, "atol": 0})
    # The views run as ATen (they move nothing); the copy is the one kernel.
    kinds = [k["kind"] for k in compiled.report()["kernels"]]
    assert sorted(set(kinds)) == ["aten_sequence", "pointwise"] and kinds.count("pointwise") == 1
    odd = torch.randn(2, 14, 14, 20, device="cuda", dtype=dtype)  # rows of 20: partial vectors
    _check(_window_partition, odd, tol={"rtol": 0, "atol": 0})
    y = torch.randn(4, 49, 96, device="cuda", dtype=dtype)
    compiled = _compile(_head_split_transposed, y)
    kinds = [k["kind"] for k in compiled.report()["kernels"]]
    assert "pointwise" not in kinds and kinds.count("transpose") == 1, kinds
    torch.testing.assert_close(compiled.run([y])[0], _head_split_transposed(y), rtol=0, atol=0)


class _ShiftedWindows(torch.nn.Module):
    """A Swin block's data movement around a per-window linear: norm, roll,
    window partition, merge, roll back, residual add."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(channels)
        self.mix = torch.nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        r = torch.roll(self.norm(x), shifts=(-3, -3), dims=(1, 2))
        win = r.view(b, h // 7, 7, w // 7, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, c)
        win = self.mix(win).view(b, h // 7, w // 7, 7, 7, c).permute(0, 1, 3, 2, 4, 5)
        return x + torch.roll(win.reshape(b, h, w, c), shifts=(3, 3), dims=(1, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_shifted_window_rolls_run_as_generated_concatenations(dtype: torch.dtype) -> None:
    """Note [Rolls as concatenations]: through torch.compile no roll reaches
    the core; the roll back joins the residual add's kernel; the values and
    gradients are eager's."""
    torch.manual_seed(0)
    model = _ShiftedWindows(32).cuda().to(dtype)
    x = torch.randn(2, 14, 14, 32, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), **TOL[dtype])
    (record,) = records
    nodes = record.core_report["nodes"]
    ops = [node["op"] for node in nodes]
    assert "aten::roll.default" not in ops and not any("index" in op for op in ops), ops
    kernels = [[nodes[n]["op"] for n in k["nodes"]] for k in record.core_report["kernels"]]
    assert any("aten::cat.default" in k and "aten::add.Tensor" in k for k in kernels), kernels
    # Training: the gradient of a roll is a roll back, generated the same way.
    grads = []
    for run in (compiled, model):
        model.zero_grad()
        xg = x.clone().requires_grad_()
        run(xg).float().square().sum().backward()
        grads.append([xg.grad] + [p.grad.clone() for p in model.parameters()])
    for got_grad, eager_grad in zip(*grads, strict=True):
        scale = eager_grad.float().abs().max().item()
        error = (got_grad.float() - eager_grad.float()).abs().max().item()
        assert error <= (1e-4 if dtype == torch.float32 else 2e-2) * scale, (error, scale)


@pytest.mark.parametrize("shape,shifts,dims", ROLL_CASES, ids=str)
def test_rolls_through_compile_are_exact(
    shape: tuple[int, ...], shifts: tuple[int, ...], dims: tuple[int, ...]
) -> None:
    """Note [Rolls as concatenations]: every case of the decomposition's unit
    test, compiled, read by an add (the roll joins its kernel) and alone."""
    x = torch.randn(shape, device="cuda")
    for fn in (lambda t: torch.roll(t, shifts, dims), lambda t: torch.roll(t, shifts, dims) + t):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
        with torch.no_grad():
            got, records = compiled_records(lambda fn=compiled: fn(x))
        torch.testing.assert_close(got, fn(x), rtol=0, atol=0)
        ops = [n["op"] for r in records for n in r.core_report["nodes"]]
        assert "aten::roll.default" not in ops, ops
