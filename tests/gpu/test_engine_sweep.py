"""GPU-marked: the engine sweep (issue 32): every pattern a planner claims,
run by its engine, against eager.

tests/gpu/test_op_sweep.py sweeps the pointwise engine op by op; this sweep
covers every engine the runtime counts (ENGINES: one per run counter of
``CompiledGraph.stats()``, tests/unit/test_engine_sweep_cases.py keeps the
two in step): generated pointwise, reduction, norm (softmax, layer/RMS
norm, training batch norm, cross-entropy), cast-group and pool kernels,
cuBLASLt products with their epilogues, cuDNN convolutions with theirs and
cuDNN SDPA graphs. One test per (pattern, dtype, mode, phase):

* dtype: fp32, bf16, fp16 (TF32 off, so fp32 is fp32 on both sides);
* mode: ``default`` and ``reduce-overhead`` (``options={"cuda_graphs":
  True}``: torch.compile refuses ``mode=`` beside ``options=``), with
  ``strict`` on, so a failure raises instead of falling back;
* phase: ``forward`` under no_grad, ``train`` the forward and the gradients
  of every floating input that is data or a weight.

Each case calls the compiled function two times (default) or three
(reduce-overhead: warm-up, capture, replay), with new data each call and its
weights and buffers kept, and compares every output, gradient and buffer
with eager's on copies of the same tensors: fp32 elementwise, bf16/fp16 by
the norm of the error relative to the norm of eager's result (sums and
products round in another order), with an elementwise bound of a few
percent of the largest value beside it.

A case is *exercised* only if the stats and report of the graphs it
compiled say its engine ran it: a group of the engine's kind was planned
(matching the pattern's marker, e.g. the cuBLASLt epilogue, where it has
one), its run counter moved, its engine's fallback counter did not, and in
reduce-overhead mode every graph was replayed as a CUDA graph. A case that
is not exercised fails, unless its pattern declares the combination
unclaimed by design (fp32 attention, say): then it is skipped with a reason
starting "not exercised". Results match eager either way.

    python -m pytest tests/gpu/test_engine_sweep.py -q      # -k "norm and bf16" for a part
    python -m benchmarks.engine_sweep                       # and docs/op-sweep.md's table
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._pytree import tree_leaves

from mybackend.reports import GraphRecord
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
# engine (the report's kernel kind) -> its run counter in CompiledGraph.stats()
ENGINES: dict[str, str] = {
    "pointwise": "generated_pointwise_run",
    "reduction": "generated_reductions_run",
    "norm": "generated_norms_run",
    "cast_group": "generated_cast_groups_run",
    "pool": "generated_pools_run",
    "transpose": "generated_transposes_run",
    "matmul": "matmul_groups_run",
    "conv": "conv_groups_run",
    "attention": "attention_groups_run",
}
# The library engines count their own fallbacks; generated kernels share one counter.
FALLBACKS: dict[str, str] = {
    "matmul": "matmul_fallbacks",
    "conv": "conv_fallbacks",
    "attention": "attention_fallbacks",
}
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
# mode -> mybackend's options for it (beside strict)
MODES: dict[str, dict[str, Any]] = {"default": {}, "reduce-overhead": {"cuda_graphs": True}}
PHASES = ("forward", "train")
CALLS = {"default": 2, "reduce-overhead": 3}
# fp32: (outputs, gradients) elementwise; 16 bits: the largest norm of the
# error relative to eager's.
FP32_TOLERANCES = ((1e-4, 1e-4), (1e-3, 1e-3))  # (rtol, atol)
RELATIVE_NORM = {torch.bfloat16: 2e-2, torch.float16: 1e-2}
ELEMENTWISE_SHARE = 5e-2  # 16 bits: |got - want| <= 5% of |want| + 5% of its largest value


@dataclasses.dataclass(frozen=True)
class Arg:
    """One input of a case's function.

    role: "data" (new values every call; differentiable in training),
    "weight" (kept across calls; differentiable), "buffer" (kept; never
    differentiable, may be updated in place) or "target" (int64 classes
    below ``high``, new every call)."""

    shape: tuple[int, ...]
    role: str = "data"
    mean: float = 0.0
    scale: float = 1.0
    channels_last: bool = False
    high: int = 0
    quantum: float = 0.0  # > 0: values rounded to its multiples (exact in every dtype)


@dataclasses.dataclass(frozen=True)
class Case:
    """A pattern a planner claims: the function, its inputs, and how to
    tell from the report that the engine took it as that pattern."""

    engine: str
    pattern: str
    fn: Callable[..., Any]
    args: tuple[Arg, ...]
    # A string one of the engine's groups must show in its spec or why, per
    # phase (absent: any group of the engine's kind will do).
    markers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    phases: tuple[str, ...] = PHASES
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # (selector, reason): where the planner declines by design. A selector is
    # "/"-separated parts of dtype, mode and phase, e.g. "fp32" or "fp16/train".
    unclaimed: tuple[tuple[str, str], ...] = ()
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    @property
    def name(self) -> str:
        return f"{self.engine}/{self.pattern}"

    def unclaimed_reason(self, dtype: str, mode: str, phase: str) -> str | None:
        for selector, reason in self.unclaimed:
            if set(selector.split("/")) <= {dtype, mode, phase}:
                return reason
        return None


# ---------------------------------------------------------------- the patterns

R, C = 64, 256  # rows and columns of 2-d cases
M, K, N, BATCH = 64, 48, 80, 3  # matrix products (test_matmul.py's sizes)
IMAGE = (2, 16, 12, 12)  # convolutions and pools
B, H, S, D = 2, 4, 64, 64  # attention


def _others(dtype: torch.dtype) -> list[torch.dtype]:
    """The two float dtypes other than ``dtype``: what the cast cases cast to."""
    return [d for d in DTYPES.values() if d != dtype]


def _casts(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    first, second = _others(a.dtype)
    return a.to(first), b.to(second), c.to(first)


def _cast_to_channels_last(w: torch.Tensor) -> torch.Tensor:
    """Autocast's weight path: a cast, then the copy into channels-last."""
    return w.to(_others(w.dtype)[0]).contiguous(memory_format=torch.channels_last)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _cudnn_sdpa_first() -> contextlib.AbstractContextManager[Any]:
    """cuDNN's SDPA op where it applies (16 bits), else memory-efficient
    attention (fp32), else math: torch's choice on Hopper, made certain."""
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    return sdpa_kernel(backends, set_priority=True)


def _efficient_sdpa() -> contextlib.AbstractContextManager[Any]:
    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


ROWS = (Arg((R, C)),)
TWO_ROWS = (Arg((R, C)), Arg((R, C)))
AFFINE = (Arg((R, C)), Arg((C,), "weight", mean=1.0, scale=0.1), Arg((C,), "weight", scale=0.1))
LINEAR = (Arg((M, K)), Arg((N, K), "weight", scale=K**-0.5), Arg((N,), "weight", scale=0.5))
# Small integers, and weights and biases in 1/32 steps: every sum the
# convolution and its epilogue make is exact in bf16 and fp16, so eager (which
# rounds the convolution before adding the residual) and the fused epilogue
# (which rounds once) agree on the sign of each value the ReLU sees.
QUANTUM = 2.0**-5
CONV = (
    Arg(IMAGE, scale=0.7, quantum=1.0),
    Arg((16, 16, 3, 3), "weight", scale=0.8 * QUANTUM, quantum=QUANTUM),
    Arg((16,), "weight", scale=0.1, quantum=QUANTUM),
)
# The same for the pool's prologue: the windows' maxima are the same elements.
POOL_PROLOGUE = (
    Arg(IMAGE, scale=1.5, quantum=0.25, channels_last=True),
    Arg((16, 1, 1), "weight", mean=1.0, scale=0.6, quantum=0.5),
    Arg((16, 1, 1), "weight", scale=0.2, quantum=0.125),
)
BATCH_NORM = (
    Arg((4, 16, 8, 8), channels_last=True),
    Arg((16,), "buffer", scale=0.2),
    Arg((16,), "buffer", mean=1.0, scale=0.1),
    Arg((16,), "weight", mean=1.0, scale=0.2),
    Arg((16,), "weight", scale=0.2),
)
QKV = tuple(Arg((B, H, S, D)) for _ in range(3))
FP32_ATTENTION = (
    "fp32",
    "cuDNN SDPA takes bf16/fp16: fp32 attention stays torch's kernel (attention_planner.cpp)",
)

# The forward chain is one norm kernel in every dtype and order (Note
# [RMS-norm chain] in src_cpp/fusion/norm_lowering.h); its backward is
# autograd's derivative of the chain, not matched as a norm backward.
RMS_NORM_BACKWARD_GAP = (
    "gap: rms_norm's backward is not matched as a norm backward; it runs as generated "
    "pointwise and reduction kernels"
)


def _llama_rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """HF LlamaRMSNorm (Mistral, Qwen): statistics in fp32, the cast back
    before the weight multiply (a 16-bit product: Note [RMS-norm rounding])."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


# fmt: off
PATTERNS: list[Case] = [
    Case("pointwise", "chain", lambda x, y: F.gelu(x) * torch.sigmoid(y) + x, TWO_ROWS),
    Case("pointwise", "broadcast_bias_relu", lambda x, b: torch.relu(x + b) * 0.5,
         (Arg((R, C)), Arg((C,), "weight"))),
    Case("reduction", "sum_rows_fused", lambda x: torch.sqrt((x * x).sum(-1) + 1.0), ROWS),
    Case("reduction", "sum_columns", lambda x: x.sum(0), ROWS),
    Case("reduction", "mean_all", lambda x: (x * x).mean(), ROWS),
    # x * 2 is exact: eager's and our maxima (and their ties) are the same elements.
    Case("reduction", "amax_rows", lambda x: torch.amax(x * 2.0, -1), ROWS,
         unclaimed=(("train", "a training forward saves x * 2 for amax's backward, so the "
                     "reduction keeps no prologue, and a lone reduction stays ATen's "
                     "(reduction planner)"),)),
    Case("norm", "softmax", lambda x: torch.softmax(x, -1), ROWS, {"forward": "softmax"}),
    Case("norm", "log_softmax", lambda x: torch.log_softmax(x, -1), ROWS,
         {"forward": "log_softmax"}),
    Case("norm", "layer_norm", lambda x, w, b: F.layer_norm(x, (C,), w, b), AFFINE,
         {"forward": "layer_norm", "train": "layer_norm_backward"}),
    Case("norm", "rms_norm", lambda x, w: F.rms_norm(x, (C,), w, 1e-6), AFFINE[:2],
         {"forward": "rms_norm", "train": "rms_norm_backward"},
         unclaimed=(("train", RMS_NORM_BACKWARD_GAP),)),
    Case("norm", "rms_norm_llama", _llama_rms_norm, AFFINE[:2],
         {"forward": "rms_norm", "train": "rms_norm_backward"},
         unclaimed=(("train", RMS_NORM_BACKWARD_GAP),)),
    Case("norm", "batch_norm_relu",
         lambda x, m, v, w, b: torch.relu(F.batch_norm(x, m, v, w, b, training=True)),
         BATCH_NORM, {"forward": "batch_norm_stats", "train": "batch_norm_backward_reduce"}),
    Case("norm", "cross_entropy", lambda x, t: F.cross_entropy(x.float(), t),
         (Arg((R, C), scale=2.0), Arg((R,), "target", high=C)),
         {"forward": "cross_entropy", "train": "cross_entropy_backward"}),
    Case("cast_group", "independent_casts", _casts,
         (Arg((7,)), Arg((4099,)), Arg((R, 33)))),
    Case("pool", "max_pool", lambda x: F.max_pool2d(x, 3, 2, 1), (Arg(IMAGE),)),
    Case("pool", "affine_relu_max_pool_nhwc",
         lambda x, s, t: F.max_pool2d(torch.relu(x * s + t), 3, 2, 1),
         POOL_PROLOGUE),
    Case("transpose", "nchw_to_nhwc",
         lambda x: x.contiguous(memory_format=torch.channels_last), (Arg(IMAGE),)),
    Case("transpose", "weight_cast_to_channels_last", _cast_to_channels_last,
         (Arg((33, 17, 7, 7), "weight"),)),
    Case("matmul", "linear_bias", lambda x, w, b: F.linear(x, w, b), LINEAR, {"forward": "BIAS"}),
    Case("matmul", "linear_relu", lambda x, w, b: torch.relu(F.linear(x, w, b)), LINEAR,
         {"forward": "RELU_BIAS"}),
    Case("matmul", "linear_gelu_tanh",
         lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), LINEAR,
         {"forward": "GELU_BIAS"}),
    Case("matmul", "bmm", lambda a, b: torch.bmm(a, b),
         (Arg((BATCH, M, K)), Arg((BATCH, K, N), "weight", scale=K**-0.5))),
    Case("matmul", "residual_3d", lambda x, w, b, r: r + F.linear(x, w, b),
         (Arg((BATCH, M, K)), *LINEAR[1:], Arg((BATCH, M, N))), {"forward": "residual="}),
    Case("conv", "conv_bias", lambda x, w, b: F.conv2d(x, w, b, padding=1), CONV,
         {"forward": "epilogue bias"}),
    Case("conv", "conv_bias_relu", lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)),
         CONV, {"forward": "epilogue bias+relu"}),
    Case("conv", "conv_bias_residual_relu",
         lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1) + x), CONV,
         {"forward": "epilogue bias+residual+relu"}),
    Case("attention", "sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), QKV,
         unclaimed=(FP32_ATTENTION,), context=_cudnn_sdpa_first),
    Case("attention", "sdpa_causal",
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), QKV,
         unclaimed=(FP32_ATTENTION,), context=_cudnn_sdpa_first),
    Case("attention", "sdpa_efficient_mask",
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         (*QKV, Arg((B, 1, S, S), "buffer")), options={"cudnn_attention": True},
         unclaimed=(FP32_ATTENTION,), context=_efficient_sdpa),
    Case("attention", "decomposed_inference", _attention, QKV, phases=("forward",),
         options={"cudnn_attention": True}, unclaimed=(FP32_ATTENTION,)),
]
# fmt: on
CASES: dict[str, Case] = {case.name: case for case in PATTERNS}


def params() -> list[Any]:
    """Every (case, dtype, mode, phase) the sweep runs."""
    return [
        pytest.param(name, dtype, mode, phase, id=f"{name}-{dtype}-{mode}-{phase}")
        for name, case in CASES.items()
        for dtype in DTYPES
        for mode in MODES
        for phase in case.phases
    ]


# ---------------------------------------------------------------- running a case


def _value(arg: Arg, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if arg.role == "target":
        return torch.randint(arg.high, arg.shape, generator=g).to(DEVICE)
    t = arg.mean + arg.scale * torch.randn(arg.shape, generator=g)
    if arg.quantum:
        t = torch.round(t / arg.quantum) * arg.quantum
    t = t.to(DEVICE, dtype)
    return t.contiguous(memory_format=torch.channels_last) if arg.channels_last else t


def _differentiable(arg: Arg) -> bool:
    return arg.role in ("data", "weight")


@dataclasses.dataclass
class Side:
    """One side's (eager's, compiled's or the fp64 reference's) function and
    its kept tensors."""

    fn: Callable[..., Any]
    kept: dict[int, torch.Tensor]  # weights and buffers, by argument position
    fp64: bool = False  # the reference: floating inputs in float64


def _as(side: Side, t: torch.Tensor) -> torch.Tensor:
    return t.double() if side.fp64 and t.is_floating_point() else t


def _call(
    side: Side, case: Case, fresh: dict[int, torch.Tensor], train: bool, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """One call: outputs, gradients of the differentiable inputs (training)
    and the kept tensors afterwards, by name. ``dtype`` is the case's: the
    fp64 reference side gets its inputs and seeds with the values they have
    in that dtype."""
    args: list[torch.Tensor] = []
    for i, arg in enumerate(case.args):
        t = side.kept[i] if i in side.kept else _as(side, fresh[i].clone())
        if train and _differentiable(arg) and t.is_floating_point():
            t = t.detach().requires_grad_()
        args.append(t)
    if not train:
        with torch.no_grad():
            outputs = list(tree_leaves(side.fn(*args)))
        grads: dict[str, torch.Tensor] = {}
    else:
        outputs = list(tree_leaves(side.fn(*args)))
        wanted = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        g = torch.Generator().manual_seed(1)
        seeds = [torch.randn(o.shape, generator=g).to(dtype).to(o.device, o.dtype) for o in wanted]
        leaves = [(i, t) for i, t in enumerate(args) if t.requires_grad]
        found = torch.autograd.grad(wanted, [t for _, t in leaves], seeds, allow_unused=True)
        grads = {f"grad of arg {i}": d for (i, _), d in zip(leaves, found, strict=True)}
    result = {f"output {i}": o.detach() for i, o in enumerate(outputs)}
    kept = {f"arg {i} after the call": t.detach() for i, t in side.kept.items()}
    return {**result, **grads, **kept}


def _close_to_reference(name: str, got: Any, want: Any, dtype: torch.dtype, exact: Any) -> None:
    """16 bits: eager's result or the fp64 reference's (Note [Eager is not
    the truth in 16 bits])."""
    try:
        _close(name, got, want, dtype)
    except AssertionError as from_eager:
        if dtype == torch.float32 or not isinstance(exact, torch.Tensor):
            raise
        if not exact.is_floating_point() or not isinstance(got, torch.Tensor):
            raise
        g, e, w = got.double(), exact.double(), want.double()
        ours = ((g - e).norm() / e.norm().clamp_min(1e-12)).item()
        eager = ((w - e).norm() / e.norm().clamp_min(1e-12)).item()
        if ours > RELATIVE_NORM[dtype]:
            raise AssertionError(
                f"{from_eager}; against fp64: ours {ours:.3g}, eager {eager:.3g}"
            ) from from_eager


def _close(name: str, got: Any, want: Any, dtype: torch.dtype) -> None:
    if not isinstance(want, torch.Tensor):  # a gradient that does not flow
        assert got is None and want is None, (name, got, want)
        return
    assert isinstance(got, torch.Tensor), (name, got)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (name, got.shape, got.dtype)
    if not want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
    elif dtype == torch.float32:
        rtol, atol = FP32_TOLERANCES[1 if name.startswith("grad") else 0]
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
    else:
        g, w = got.double(), want.double()
        error = ((g - w).norm() / w.norm().clamp_min(1e-12)).item()
        assert error <= RELATIVE_NORM[dtype], f"{name}: relative error {error:.3g}"
        peak = w.abs().max().item() if w.numel() else 0.0
        torch.testing.assert_close(
            g, w, rtol=ELEMENTWISE_SHARE, atol=ELEMENTWISE_SHARE * peak + 1e-6,
            msg=lambda m: f"{name}: {m}",
        )  # fmt: skip


# Note [Eager is not the truth in 16 bits]
# Eager rounds every op's result to bf16/fp16; a fused kernel rounds once.
# Where a discontinuous op follows (a ReLU's mask, a maximum's index), the
# two can pick different branches for values that round across the edge,
# and then eager is the one further from the exact answer: on an H200
# (2026-11-27), eager's bf16 convolution + bias + ReLU put 13 of 4608 outputs
# at 2e-7 where the exact value is 0, and its input gradient had a relative
# error of 7e-2 against fp64 where ours had 1.7e-3. So in 16 bits a result
# that misses eager's passes when it is within the dtype's relative norm of
# an fp64 run on the same (rounded) inputs.


def _compare(
    got: dict[str, Any],
    want: dict[str, Any],
    dtype: torch.dtype,
    call: int,
    exact: dict[str, Any],
) -> None:
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    for name, w in want.items():
        try:
            _close_to_reference(name, got[name], w, dtype, exact.get(name))
        except AssertionError as error:
            raise AssertionError(f"call {call + 1}: {error}") from error


def _sum_stats(records: Sequence[GraphRecord]) -> dict[str, int]:
    total: dict[str, int] = {}
    for record in records:
        for key, value in record.compiled.stats().items():
            total[key] = total.get(key, 0) + value
    return total


def why_not_exercised(
    case: Case, records: Sequence[GraphRecord], mode: str, phase: str
) -> str | None:
    """None when the case's engine ran it (see the module's docstring), else why not."""
    compiled = [r for r in records if r.compiled is not None]
    fell_back = [f"{r.name}: {r.fallback_reason}" for r in records if r.compiled is None]
    if not compiled or fell_back:
        return f"graphs the core did not compile: {fell_back or 'none compiled'}"
    kernels = [k for r in compiled for k in (r.core_report or {}).get("kernels", [])]
    mine = [k for k in kernels if k["kind"] == case.engine]
    if not mine:
        planned = sorted({k["kind"] for k in kernels})
        whys = sorted({k["why"] for k in kernels if k["kind"] == "aten_sequence"})[:3]
        return f"no {case.engine} group planned (groups: {planned}; aten groups: {whys})"
    problems = [k.get("problem") for k in mine if k.get("problem")]
    marker = case.markers.get(phase)
    if marker and not any(marker in f"{k['spec']} {k['why']}" for k in mine):
        return f"no {case.engine} group shows {marker!r}: {[k['spec'] for k in mine]}"
    stats = _sum_stats(compiled)
    if stats[ENGINES[case.engine]] == 0:
        return f"{ENGINES[case.engine]} stayed 0 ({problems})"
    fallbacks = FALLBACKS.get(case.engine, "generated_kernel_fallbacks")
    if stats[fallbacks]:
        return f"{fallbacks} = {stats[fallbacks]} ({problems})"
    if mode == "reduce-overhead":
        idle = [r for r in compiled if r.compiled.stats()["cuda_graph_replays"] == 0]
        if idle:
            status = [(r.core_report or {}).get("cuda_graphs") for r in idle]
            return f"not replayed as CUDA graphs: {status}"
    return None


@contextlib.contextmanager
def _exact_fp32() -> Iterator[None]:
    """No TF32 in products and convolutions, eager's and ours."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            yield
    finally:
        torch.set_float32_matmul_precision(precision)


def run_case(case: Case, dtype_name: str, mode: str, phase: str) -> str | None:
    """Runs one case against eager; returns why its engine did not run it (None: it did)."""
    dtype, train = DTYPES[dtype_name], phase == "train"
    g = torch.Generator().manual_seed(0)
    kept = {
        i: _value(a, dtype, g) for i, a in enumerate(case.args) if a.role in ("weight", "buffer")
    }
    # The floors may hand a group back to ATen where ATen is faster on this
    # GPU (Note [Eager is the floor]); the sweep is of the engines, and a
    # case's lone convolution is planned channels-last as a CNN's would be
    # (Note [Layout regions pay for their copies]).
    options = {
        "strict": True,
        "eager_floor": False,
        "channels_last_everywhere": True,
        **MODES[mode],
        **case.options,
    }
    compiled = torch.compile(case.fn, backend="mybackend", fullgraph=True, options=options)
    eager = Side(case.fn, {i: t.clone() for i, t in kept.items()})
    ours = Side(compiled, {i: t.clone() for i, t in kept.items()})
    reference = Side(case.fn, {}, fp64=True)
    reference.kept = {i: _as(reference, t.clone()) for i, t in kept.items()}
    records: list[GraphRecord] = []
    with _exact_fp32(), case.context():
        for call in range(CALLS[mode]):
            fresh = {
                i: _value(a, dtype, g) for i, a in enumerate(case.args) if i not in kept
            }  # fmt: skip
            want = _call(eager, case, fresh, train, dtype)
            got, new = compiled_records(lambda: _call(ours, case, fresh, train, dtype))  # noqa: B023
            records += new
            exact = {}
            # Casts and copies are exact, and casts' targets depend on the input dtype.
            if dtype != torch.float32 and case.engine not in ("cast_group", "transpose"):
                with sdpa_kernel([SDPBackend.MATH]):  # the one SDPA kernel of fp64
                    exact = _call(reference, case, fresh, train, dtype)
            _compare(got, want, dtype, call, exact)
    return why_not_exercised(case, records, mode, phase)


@pytest.mark.parametrize("name, dtype_name, mode, phase", params())
def test_engine_sweep(name: str, dtype_name: str, mode: str, phase: str) -> None:
    case = CASES[name]
    why = run_case(case, dtype_name, mode, phase)
    if why is None:
        return
    if (reason := case.unclaimed_reason(dtype_name, mode, phase)) is not None:
        pytest.skip(f"not exercised: {reason} ({why})")
    raise AssertionError(f"not exercised: {why}")
