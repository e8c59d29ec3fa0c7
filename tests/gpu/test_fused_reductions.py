"""GPU-marked: generated reduction and norm kernels against eager.

Each test compiles an ATen graph (decomposed as aot_autograd decomposes it)
whose plan has a `reduction` or `norm` group, runs it on the GPU, compares
with eager and checks the per-kind counter (generated_reductions_run /
generated_norms_run) to prove the generated kernel ran, not the ATen form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.decompositions import decomposition_table
from mybackend.lowering import lower
from tests.gpu.test_fused_kernels import _fetched_images
from tests.testing import error_ratio_check

pytestmark = [
    pytest.mark.gpu,
]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {
    F32: {"rtol": 1e-5, "atol": 1e-5},
    F16: {"rtol": 2e-3, "atol": 2e-3},
    BF16: {"rtol": 1.6e-2, "atol": 1.6e-2},
}
# fp32 sums of up to 65536 terms in another order than eager's.
TOL_SUM = {F32: {"rtol": 5e-5, "atol": 5e-5}, F16: TOL[F16], BF16: TOL[BF16]}
COUNTER = {"reduction": "generated_reductions_run", "norm": "generated_norms_run"}
ROW_LENGTHS = [1, 7, 33, 256, 1000, 4096, 65536]


def _compile(fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    traced = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")
    lowered = lower(traced(*inputs), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def _check(
    fn: Callable[..., Any],
    *inputs: torch.Tensor,
    kind: str,
    tol: dict[str, float],
    generated: bool = True,
    traced_with: tuple[torch.Tensor, ...] | None = None,
    reference: Callable[..., Any] | None = None,
) -> Any:
    """Compiles fn (traced with `traced_with`, default the inputs), runs it on
    `inputs` and compares with eager (`reference`, default fn); `generated`:
    the kernel must have run."""
    compiled = _compile(fn, *(traced_with or inputs))
    kinds = [k["kind"] for k in compiled.report()["kernels"]]
    assert kind in kinds, compiled.report()["kernels"]
    got = compiled.run(list(inputs))
    torch.cuda.synchronize()
    expected = (reference or fn)(*inputs)
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if e is None:
            continue
        assert g.dtype == e.dtype and g.shape == e.shape and g.device == e.device, (g, e)
        # Both NaN where eager's is (the mean of no elements).
        torch.testing.assert_close(g, e, equal_nan=True, **tol)
    stats = compiled.stats()
    if generated:
        assert stats[COUNTER[kind]] >= 1, (stats, compiled.report()["kernels"])
        assert stats["generated_kernel_fallbacks"] == 0, compiled.report()["kernels"]
    else:
        assert stats["generated_kernels_run"] + stats["generated_kernel_fallbacks"] >= 1, stats
    return compiled


def _randn(*shape: int, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=dtype)


# ---- reductions with prologue and epilogue ------------------------------------------

REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": lambda x: (x * 0.5).exp().sum(-1).sqrt(),
    "mean": lambda x: (x * x).mean(-1, keepdim=True) + 1,
    "amax": lambda x: x.abs().amax(-1).neg(),
    "amin": lambda x: (x - 1).amin(-1) * 2,
    "var": lambda x: torch.var(x * 3, dim=-1),
    "std": lambda x: torch.std(x + 1, dim=-1, correction=0),
    "argmax": lambda x: (x * x).argmax(-1),
    "argmin": lambda x: (x * 2).argmin(-1),
}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("cols", ROW_LENGTHS)
def test_reductions_over_the_last_dim(name: str, cols: int, dtype: torch.dtype) -> None:
    if name == "var" and cols == 1:
        pytest.skip("var of one element with correction 1 is nan in both; covered by std")
    x = _randn(3, cols, dtype=dtype)
    _check(REDUCTIONS[name], x, kind="reduction", tol=TOL_SUM[dtype])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    ("shape", "fn"),
    [
        ((64, 40), lambda x: (x * 2).sum(0).relu()),  # leading dim
        ((8, 16, 5), lambda x: (x * 2).sum((0, 1), keepdim=True) - 1),  # leading range
        ((6, 33, 7), lambda x: (x - 0.5).mean(1) * 3),  # middle dim
        ((9, 31, 4), lambda x: torch.var(x * 2, dim=1)),
        ((5, 17, 3), lambda x: x.abs().argmax(1)),
        ((2048, 3), lambda x: (x * x).amax(0).sqrt()),
    ],
    ids=["sum0", "sum01", "mean1", "var1", "argmax1", "amax0"],
)
def test_reductions_over_leading_and_middle_dims(
    shape: tuple[int, ...], fn: Callable[..., Any], dtype: torch.dtype
) -> None:
    _check(fn, _randn(*shape, dtype=dtype), kind="reduction", tol=TOL_SUM[dtype])


COLUMN_REDUCTIONS: dict[str, Callable[..., Any]] = {
    # Lone: Note [Lone column reductions]; the second is autocast's bias gradient.
    "sum": lambda x: x.sum(-2),
    "sum_f32": lambda x: x.sum(-2, keepdim=True, dtype=torch.float32),
    "amax": lambda x: x.amax(-2),
    "mean": lambda x: (x * x).mean(-2) + 1,
    "var": lambda x: torch.var(x * 2, dim=-2),
    "argmax": lambda x: (x * 3).argmax(-2),
}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("name", list(COLUMN_REDUCTIONS))
@pytest.mark.parametrize("shape", [(12608, 768), (4, 5000, 48), (100003, 5)], ids=str)
def test_split_outer_reductions(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Note [Split outer reductions]: long columns of few outputs are cut in
    row chunks whose partials combine in order: same results as eager's."""
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == F32 else TOL_SUM[dtype]
    _check(COLUMN_REDUCTIONS[name], _randn(*shape, dtype=dtype), kind="reduction", tol=tol)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("name", list(COLUMN_REDUCTIONS))
@pytest.mark.parametrize("shape", [(49, 960), (3, 7, 100), (2, 30, 33), (1, 196, 336)], ids=str)
def test_short_outer_reductions_run_narrow_tiles(
    name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Note [Narrow outer tiles]: columns too few for the wide tiles to fill
    the GPU, rows short enough for one pass (196: the split form's before):
    the narrow entry runs, and the results are eager's (partial last tiles
    included: 100 and 33 columns)."""
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == F32 else TOL_SUM[dtype]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _check(COLUMN_REDUCTIONS[name], _randn(*shape, dtype=dtype), kind="reduction", tol=tol)
    names = [e.name for e in prof.events() if e.name.startswith("mb_reduction_")]
    assert names and all(n.endswith("_narrow") for n in names), names


def test_a_channels_last_global_pool_runs_narrow_tiles() -> None:
    """A CNN's closing global average pool at batch 1: batch norm and
    hardswish over channels-last [1, 960, 7, 7], then the mean over H and W,
    walked as columns (Note [Reductions walked in memory order])."""

    def pool(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x * scale + shift).mean((2, 3))

    x = _randn(1, 960, 7, 7, dtype=BF16).contiguous(memory_format=torch.channels_last)
    scale, shift = _randn(960, 1, 1, dtype=BF16), _randn(960, 1, 1, dtype=BF16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _check(pool, x, scale, shift, kind="reduction", tol=TOL_SUM[BF16])
    names = [e.name for e in prof.events() if e.name.startswith("mb_reduction_")]
    assert names and all(n.endswith("_narrow") for n in names), names


def _ran_split(prof: torch.profiler.profile) -> bool:
    """Whether a split inner reduction's two entries ran under `prof`."""
    names = [e.name for e in prof.events() if e.name.startswith("mb_reduction_")]
    return any(n.endswith("_partials") for n in names) and any(n.endswith("_totals") for n in names)


def test_split_outer_means_replay_under_cuda_graphs() -> None:
    """A squeeze-excitation mean (channels-last activations, mean over H and
    W: a split outer reduction, Note [Split outer reductions]) inside a
    captured CUDA graph, its workspace allocated in the capture: every replay
    equals eager."""
    from tests.testing import compiled_records

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x.mean((2, 3), keepdim=True)) * x

    x = _randn(1, 120, 28, 28, dtype=BF16).to(memory_format=torch.channels_last)
    compiled = torch.compile(fn, backend="mybackend", options={"strict": True, "cuda_graphs": True})
    got, records = compiled_records(lambda: compiled(x))
    torch.testing.assert_close(got, fn(x), **TOL_SUM[BF16])
    for _ in range(3):  # the capture, then replays
        torch.testing.assert_close(compiled(x), fn(x), **TOL_SUM[BF16])
    stats = [r.compiled.stats() for r in records if r.compiled]
    assert sum(s["generated_reductions_run"] for s in stats) >= 1, stats
    assert sum(s["generated_kernel_fallbacks"] for s in stats) == 0, stats


SPLIT_INNER: dict[str, Callable[..., Any]] = {
    "sum": lambda x: (x * 0.5).sum(-1),
    "mean": lambda x: (x * x).mean(-1),
    "var": lambda x: torch.var(x * 3, dim=-1, correction=1),
    "amax": lambda x: x.abs().amax(-1),
    "argmax": lambda x: (x * 2).argmax(-1),
}


@pytest.mark.parametrize(
    ("name", "rows", "n", "dtype"),
    [
        # Past 2^22 elements into one result: ATen ran this call before the
        # split form; an odd row is not whole vectors (the scalar loads).
        ("sum", 1, 4_194_305, BF16),
        ("mean", 3, 1_048_576, F32),
        ("var", 63, 100_000, F32),  # 6.3M elements into 63: also ATen's before
        ("amax", 3, 5_000, BF16),  # too short to split: a block per row
        ("argmax", 1, 2_000_000, F32),
        ("argmax", 63, 65_536, BF16),
    ],
    ids=str,
)
def test_split_inner_reductions(name: str, rows: int, n: int, dtype: torch.dtype) -> None:
    """Note [Split inner reductions]: few long rows are cut in chunks whose
    partials combine in order (argmax indices within the whole row, mean and
    var over the whole row); the generated kernel runs, not ATen's split
    reduction, which it replaced for such calls."""
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == F32 else TOL_SUM[dtype]
    x = _randn(rows, n, dtype=dtype)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _check(SPLIT_INNER[name], x, kind="reduction", tol=tol)
    # Chunks of at least 8192 elements: 5000 stays one pass.
    assert _ran_split(prof) == (n >= 2 * 8192), [e.name for e in prof.events()]


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_mse_loss_runs_split_under_torch_compile(dtype: torch.dtype) -> None:
    """BERT-base's MSE loss, one mean over 4096 x 768 elements with its
    subtraction and square as the prologue: the split inner form (720 us as
    one block on an H100 before it), through torch.compile."""
    from tests.testing import compiled_records

    def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return ((x - t) ** 2).mean()

    x, t = _randn(4096, 768, dtype=dtype), _randn(4096, 768, dtype=dtype)
    compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got, records = compiled_records(lambda: compiled(x, t))
        torch.cuda.synchronize()
    assert _ran_split(prof), [e.name for e in prof.events()]
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == F32 else TOL_SUM[dtype]
    torch.testing.assert_close(got, fn(x, t), **tol)
    stats = [r.compiled.stats() for r in records if r.compiled]
    assert sum(s["generated_reductions_run"] for s in stats) == 1, stats
    assert sum(s["generated_kernel_fallbacks"] for s in stats) == 0, stats


def test_full_reduction_with_epilogue() -> None:
    _check(lambda x: (x * 2).sum().sqrt(), _randn(37, 41).abs(), kind="reduction", tol=TOL_SUM[F32])


@pytest.mark.parametrize("shape", [(1, 1), (5, 1), (1, 9), (0, 8), (4, 0)], ids=str)
def test_reductions_of_size_one_and_zero_dims(shape: tuple[int, ...]) -> None:
    x = _randn(*shape)
    _check(lambda t: (t * 2).sum(-1) + 1, x, kind="reduction", tol=TOL[F32])
    _check(lambda t: (t * 2).mean(-1).exp(), x, kind="reduction", tol=TOL[F32])


def test_amax_of_empty_rows_falls_back_to_aten() -> None:
    x = _randn(0, 5)  # no rows: nothing to reduce, the kernel writes nothing
    _check(lambda t: (t * 2).amax(-1) + 1, x, kind="reduction", tol=TOL[F32])


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_non_contiguous_inputs(dtype: torch.dtype) -> None:
    base = _randn(40, 24, dtype=dtype)
    fn = REDUCTIONS["sum"]
    # Traced with the transposed view: a strided prologue input.
    _check(fn, base.t(), kind="reduction", tol=TOL_SUM[dtype])
    # Traced contiguous, called with a strided view: the general variant runs.
    _check(
        fn,
        base.t(),
        kind="reduction",
        tol=TOL_SUM[dtype],
        traced_with=(_randn(24, 40, dtype=dtype),),
    )
    _check(fn, base[:, ::3], kind="reduction", tol=TOL_SUM[dtype])


def test_epilogue_reads_another_tensor() -> None:
    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(-1) * b + 1

    _check(fn, _randn(16, 300), _randn(16), kind="reduction", tol=TOL_SUM[F32])


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_an_epilogue_recomputes_its_operands_producers(dtype: torch.dtype) -> None:
    """Note [Epilogue operands recomputed]: an RMS norm backward's
    pow(rstd, 3) over the reduced space runs in the row sums' kernel."""

    def fn(x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(-1, keepdim=True) * rstd.pow(3) * -0.5

    x, rstd = _randn(16, 300, dtype=dtype), _randn(16, 1, dtype=dtype).abs() + 0.5
    compiled = _check(fn, x, rstd, kind="reduction", tol=TOL_SUM[dtype])
    report = compiled.report()
    ops = [n["op"] for n in report["nodes"]]
    (reduction,) = [k for k in report["kernels"] if k["kind"] == "reduction"]
    assert "aten::pow.Tensor_Scalar" in [ops[n] for n in reduction["nodes"]], report["kernels"]
    assert all(
        k["kind"] != "aten_sequence"
        or "aten::pow.Tensor_Scalar" not in [ops[n] for n in k["nodes"]]
        for k in report["kernels"]
    )


# ---- norms -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("cols", ROW_LENGTHS)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_forward_and_backward(cols: int, log: bool, dtype: torch.dtype) -> None:
    x = _randn(5, cols, dtype=dtype)
    forward = (lambda t: F.log_softmax(t, -1)) if log else (lambda t: torch.softmax(t, -1))
    _check(forward, x, kind="norm", tol=TOL[dtype])
    y, g = forward(x), _randn(5, cols, dtype=dtype)
    op = (
        torch.ops.aten._log_softmax_backward_data.default
        if log
        else torch.ops.aten._softmax_backward_data.default
    )
    _check(lambda gy, out: op(gy, out, -1, dtype), g, y, kind="norm", tol=TOL[dtype])


def test_softmax_to_float_and_odd_shapes() -> None:
    x = _randn(3, 4, 77, dtype=BF16)
    _check(lambda t: torch.softmax(t, -1, dtype=torch.float32), x, kind="norm", tol=TOL[F32])
    _check(lambda t: torch.softmax(t, -1), _randn(0, 8), kind="norm", tol=TOL[F32])
    # Rows of no elements: the ATen form runs (and returns the empty result).
    _check(lambda t: torch.softmax(t, -1), _randn(4, 0), kind="norm", tol=TOL[F32], generated=False)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("cols", [1, 33, 768, 4096, 65536])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward(cols: int, dtype: torch.dtype, affine: bool) -> None:
    x = _randn(6, cols, dtype=dtype)
    if affine:
        w, b = _randn(cols, dtype=dtype), _randn(cols, dtype=dtype)
        _check(
            lambda t, w, b: torch.ops.aten.native_layer_norm(t, [cols], w, b, 1e-5),
            x,
            w,
            b,
            kind="norm",
            tol=TOL[dtype],
        )
    else:
        _check(
            lambda t: torch.ops.aten.native_layer_norm(t, [cols], None, None, 1e-5),
            x,
            kind="norm",
            tol=TOL[dtype],
        )


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape", [(197, 768), (40000, 768), (5, 33)], ids=str)
def test_layer_norm_forward_without_statistics(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Inference reads y alone: the kernel stores no statistics (40000 rows:
    several rows per thread)."""
    x = _randn(*shape, dtype=dtype)
    w, b = _randn(shape[-1], dtype=dtype), _randn(shape[-1], dtype=dtype)
    _check(
        lambda t, w, b: torch.ops.aten.native_layer_norm(t, [shape[-1]], w, b, 1e-5)[0],
        x,
        w,
        b,
        kind="norm",
        tol=TOL[dtype],
    )


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape", [(1, 1024), (197, 768), (40000, 768), (5, 33)], ids=str)
def test_layer_norm_reads_its_input_through_a_prologue(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Note [Norm prologues]: a GELU only the layer norm reads runs inside
    the norm kernel's loads (the MLP block's tail): one kernel, the GELU's
    result never stored, rounded to the input dtype as eager's is. Few rows
    take the wide-rows entry, 40000 the default one, 33 columns the loop."""
    x = _randn(*shape, dtype=dtype)
    w, b = _randn(shape[-1], dtype=dtype), _randn(shape[-1], dtype=dtype)

    def fn(t: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.native_layer_norm(F.gelu(t), [shape[-1]], w, b, 1e-5)[0]

    compiled = _check(fn, x, w, b, kind="norm", tol=TOL[dtype])
    (norm,) = compiled.report()["kernels"]
    assert "prologue:" in norm["spec"] and "gelu_erf" in norm["spec"], norm["spec"]


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("cols", [64, 4096, 33])
def test_rms_norm_reads_its_input_through_a_prologue(cols: int, dtype: torch.dtype) -> None:
    """Note [Norm prologues] with two dense inputs: rms_norm(tanh(a) + c)."""
    a, c, w = _randn(9, cols, dtype=dtype), _randn(9, cols, dtype=dtype), _randn(cols, dtype=dtype)

    def fn(a: torch.Tensor, c: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(torch.tanh(a) + c, (cols,), w, 1e-6)

    compiled = _check(fn, a, c, w, kind="norm", tol=TOL[dtype])
    (norm,) = compiled.report()["kernels"]
    assert "prologue:" in norm["spec"] and "tanh" in norm["spec"], norm["spec"]


# (scores shape, addend shapes): Swin's window attention at batch 2 (a
# relative position bias over heads, a shift mask over windows, seen as
# [batch, windows, heads, N, N]), a padding mask over keys, T5's position bias
# with a ViT's 197 tokens, and rows long enough for the loop path.
SOFTMAX_ADDENDS: dict[str, tuple[tuple[int, ...], list[tuple[int, ...]]]] = {
    "window_bias": ((128, 3, 49, 49), [(3, 49, 49)]),
    "window_bias_and_shift_mask": ((2, 64, 3, 49, 49), [(3, 49, 49), (64, 1, 49, 49)]),
    "key_padding_mask": ((4, 12, 64, 64), [(4, 1, 1, 64)]),
    "position_bias": ((2, 8, 197, 197), [(1, 8, 197, 197)]),
    "long_rows": ((3, 2, 8200), [(8200,)]),
}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("case", list(SOFTMAX_ADDENDS))
def test_softmax_reads_broadcast_addends_in_its_prologue(case: str, dtype: torch.dtype) -> None:
    """Note [Softmax prologues with broadcast inputs]: scores plus addends
    that broadcast over them, then a softmax, run as one norm kernel reading
    the addends by their strides; the sum is never stored. A 2-d addend is
    read through a transposed view, as an attention bias permuted from
    [N, N, heads] is. In bf16 the kernel rounds the sum once where eager
    rounds after each add (an element of Swin's scores may move by a bf16
    step, 0.1 of its probability, H200 2026-11-27), so it is judged against
    fp64 beside eager's own error, as Inductor's fused kernels would be."""
    shape, addends = SOFTMAX_ADDENDS[case]
    scores = _randn(*shape, dtype=dtype) * 3
    extra = [_randn(*a, dtype=dtype) for a in addends]
    if extra[0].dim() >= 2:
        extra[0] = extra[0].transpose(-1, -2).contiguous().transpose(-1, -2)

    def fn(s: torch.Tensor, *adds: torch.Tensor) -> torch.Tensor:
        for a in adds:
            s = s + a
        return torch.softmax(s, -1)

    compiled = _compile(fn, scores, *extra)
    kernels = compiled.report()["kernels"]
    assert [k["kind"] for k in kernels] == ["norm"], kernels
    assert "prologue:" in kernels[0]["spec"] and "strided" in kernels[0]["spec"], kernels[0]["spec"]
    (got,) = compiled.run([scores, *extra])
    torch.cuda.synchronize()
    stats = compiled.stats()
    assert stats["generated_norms_run"] == 1 and stats["generated_kernel_fallbacks"] == 0, stats
    want = fn(scores, *extra)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype is F32:
        torch.testing.assert_close(got, want, **TOL[dtype])
    else:
        error_ratio_check(got, lambda: fn(scores.double(), *(a.double() for a in extra)), want)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_a_mask_added_before_a_view_joins_the_softmax(dtype: torch.dtype) -> None:
    """Note [Softmaxes before their views] through torch.compile: BART's
    eager attention adds the mask on [B, H, T, S] and takes the softmax of
    the [B * H, T, S] view; the softmax runs first, on the sum, which it
    reads through its prologue, so one norm kernel computes both."""
    from tests.testing import compiled_records

    b, h, t, s = 2, 12, 64, 64

    def fn(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = scores.view(b, h, t, s) + mask
        return torch.softmax(weights.view(b * h, t, s), dim=-1) * 1.0

    scores = _randn(b * h, t, s, dtype=dtype) * 3
    mask = torch.where(_randn(b, 1, 1, s) > 1, -1e4, 0.0).to(dtype)
    compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(scores, mask))
        want = fn(scores, mask)
    (record,) = records
    norms = [k for k in record.core_report["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1 and "prologue:" in norms[0]["spec"], record.core_report["kernels"]
    if dtype is F32:
        torch.testing.assert_close(got, want, **TOL[dtype])
    else:
        error_ratio_check(got, lambda: fn(scores.double(), mask.double()), want)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_shifted_window_bias_and_mask_join_the_softmax(dtype: torch.dtype) -> None:
    """Note [Elementwise ops past their views] through torch.compile: Swin's
    shifted-window attention adds the position bias before a view and the
    shift mask after it; both adds move into the softmax kernel's prologue."""
    from tests.testing import compiled_records

    b, w, h, n = 2, 16, 3, 49

    def fn(scores: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = (scores + bias).view(b, w, h, n, n) + mask
        return torch.softmax(s.view(b * w, h, n, n), -1) * 1.0

    scores = _randn(b * w, h, n, n, dtype=dtype) * 3
    bias = _randn(1, h, n, n, dtype=dtype)
    mask = torch.where(_randn(1, w, 1, n, n) > 1, -100.0, 0.0).to(dtype)
    compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(scores, bias, mask))
        want = fn(scores, bias, mask)
    (record,) = records
    kernels = record.core_report["kernels"]
    norms = [k for k in kernels if k["kind"] == "norm"]
    assert len(norms) == 1 and norms[0]["spec"].count("add") == 2, kernels
    if dtype is F32:
        torch.testing.assert_close(got, want, **TOL[dtype])
    else:
        error_ratio_check(got, lambda: fn(scores.double(), bias.double(), mask.double()), want)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape", [(197, 768), (5, 33), (9, 20000)], ids=str)
def test_a_residual_sum_read_elsewhere_is_stored_by_its_layer_norm(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Note [A norm prologue read elsewhere]: the residual sum a pre-norm
    block's next norm reads, and the next residual add too, is computed and
    stored by the norm kernel (768 columns: the register path; 33: scalar
    rows; 20000: the loop path, which stores each element twice)."""
    a, r = _randn(*shape, dtype=dtype), _randn(*shape, dtype=dtype)
    w, b = _randn(shape[-1], dtype=dtype), _randn(shape[-1], dtype=dtype)

    def fn(a: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        s = a + r
        return torch.ops.aten.native_layer_norm(s, [shape[-1]], w, b, 1e-5)[0], s * 2

    compiled = _check(fn, a, r, w, b, kind="norm", tol=TOL[dtype])
    (norm,) = [k for k in compiled.report()["kernels"] if k["kind"] == "norm"]
    assert "store_x=1" in norm["spec"], norm["spec"]


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("read", ["sum", "view"])
def test_a_residual_sum_normalized_through_a_view_is_stored(read: str, dtype: torch.dtype) -> None:
    """Note [A norm prologue read elsewhere] through a shape view: Swin sums
    its residual on [B, H, W, C] and normalizes the [B, H * W, C] view, which
    the next residual add reads too; the norm kernel computes the sum and
    stores it as the other reader sees it (the sum, or its view)."""
    a, r = _randn(2, 14, 14, 96, dtype=dtype), _randn(2, 14, 14, 96, dtype=dtype)
    w, b = _randn(96, dtype=dtype), _randn(96, dtype=dtype)

    def fn(a: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        s = a + r
        rows = s.view(2, 196, 96)
        y = torch.ops.aten.native_layer_norm(rows, [96], w, b, 1e-5)[0]
        return y, (s if read == "sum" else rows) * 2

    compiled = _check(fn, a, r, w, b, kind="norm", tol=TOL[dtype])
    kernels = compiled.report()["kernels"]
    (norm,) = [k for k in kernels if k["kind"] == "norm"]
    assert "store_x=1" in norm["spec"], norm["spec"]
    # The norm kernel covers the sum, its view and the norm; the doubling,
    # a lone elementwise op, runs as ATen.
    others = [k for k in kernels if k is not norm]
    assert len(norm["nodes"]) == 3 and len(others) == 1, kernels
    assert others[0]["why"].startswith("not generated: mul"), kernels


@pytest.mark.parametrize("target", [BF16, F16])
@pytest.mark.parametrize("shape", [(4, 3, 768), (5, 33), (2, 4096), (1, 65536)], ids=str)
def test_layer_norm_stores_its_cast_output(shape: tuple[int, ...], target: torch.dtype) -> None:
    """Note [Norm outputs in 16 bits]: an f32 layer norm whose result only
    feeds a cast writes the cast's dtype; the mean and rstd stay f32."""
    cols = shape[-1]
    x, w, b = _randn(*shape), _randn(cols), _randn(cols)

    def fn(t: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, mean, rstd = torch.ops.aten.native_layer_norm(t, [cols], w, b, 1e-5)
        return y.view(-1, cols).to(target), mean, rstd

    compiled = _check(fn, x, w, b, kind="norm", tol=TOL[target])
    (norm,) = compiled.report()["kernels"]
    assert "out=" + {BF16: "bf16", F16: "f16"}[target] in norm["spec"], norm["spec"]


@pytest.mark.parametrize("target", [BF16, F16])
@pytest.mark.parametrize("shape", [(4, 3, 1024), (5, 33), (2, 4096), (1, 65536)], ids=str)
def test_rms_norm_stores_its_cast_output(shape: tuple[int, ...], target: torch.dtype) -> None:
    """Note [Norm outputs in 16 bits]: an f32 RMS norm (a decoder's f32
    residual stream under autocast) whose result only feeds the product's
    cast writes the cast's dtype, with its residual add as prologue."""
    cols = shape[-1]
    h, a, w = _randn(*shape), _randn(*shape), _randn(cols)

    def fn(h: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = h + a
        y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        return y.view(-1, cols).to(target), x

    compiled = _check(fn, h, a, w, kind="norm", tol=TOL[target])
    (norm,) = compiled.report()["kernels"]
    assert "rms_norm dtype=f32 out=" + {BF16: "bf16", F16: "f16"}[target] in norm["spec"], norm


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    "shape", [(4, 3, 32), (7, 1000), (1, 4096), (0, 16), (197, 768), (5, 33), (3, 65536)], ids=str
)
def test_layer_norm_backward(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    cols = shape[-1]
    x, g = _randn(*shape, dtype=dtype), _randn(*shape, dtype=dtype)
    w, b = _randn(cols, dtype=dtype), _randn(cols, dtype=dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [cols], w, b, 1e-5)

    def backward(
        gy: torch.Tensor,
        t: torch.Tensor,
        m: torch.Tensor,
        r: torch.Tensor,
        w: torch.Tensor,
        b: torch.Tensor,
    ) -> Any:
        return torch.ops.aten.native_layer_norm_backward(
            gy, t, [cols], m, r, w, b, [True, True, True]
        )

    # Weight/bias grads sum over rows in another order: looser in fp32.
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == F32 else {"rtol": 3e-2, "atol": 3e-2}
    _check(backward, g, x, mean, rstd, w, b, kind="norm", tol=tol)


def test_layer_norm_of_non_contiguous_input() -> None:
    base = _randn(64, 48)
    w, b = _randn(64), _randn(64)
    fn = lambda t, w, b: F.layer_norm(t, (64,), w, b)  # noqa: E731
    _check(fn, base.t(), w, b, kind="norm", tol=TOL[F32], traced_with=(_randn(48, 64), w, b))


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("cols", [1, 64, 1000, 4096, 65536])
def test_rms_norm(cols: int, dtype: torch.dtype) -> None:
    x, w = _randn(4, cols, dtype=dtype), _randn(cols, dtype=dtype)
    _check(lambda t, w: F.rms_norm(t, (cols,), w, 1e-6), x, w, kind="norm", tol=TOL[dtype])
    _check(lambda t: F.rms_norm(t, (cols,)), x, kind="norm", tol=TOL[dtype])


def test_rms_norm_training_saves_rstd() -> None:
    model = torch.nn.RMSNorm(256, eps=1e-6).cuda()
    compiled = torch.compile(
        model, backend="mybackend", options={"strict": True, "generated_kernels": True}
    )
    x = _randn(8, 256, dtype=F32).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    out = compiled(x)
    expected = model(x_ref)
    torch.testing.assert_close(out, expected, **TOL[F32])
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)


def test_model_with_norms_under_torch_compile() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = torch.nn.LayerNorm(64)
            self.fc = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(self.ln(x)), -1)

    model = Block().cuda()
    compiled = torch.compile(
        model, backend="mybackend", options={"strict": True, "generated_kernels": True}
    )
    x = _randn(16, 64).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = compiled(x)
        out.sum().backward()
        torch.cuda.synchronize()
    expected = model(x_ref)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    names = [e.name for e in prof.events()]
    assert any(n.startswith("mb_norm_") for n in names), "no generated norm kernel ran"


def test_dynamic_rows_share_one_kernel() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (128,), w, 1e-6)

    compiled = torch.compile(
        fn, backend="mybackend", dynamic=True, options={"strict": True, "generated_kernels": True}
    )
    w = _randn(128)
    for rows in (3, 5, 129):
        x = _randn(rows, 128)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            got = compiled(x, w)
            torch.cuda.synchronize()
        torch.testing.assert_close(got, fn(x, w), **TOL[F32])
        assert any(e.name.startswith("mb_norm_") for e in prof.events())


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape", [(4, 197, 768), (5, 33), (3, 4096)], ids=str)
def test_a_backward_norm_hands_grad_in_to_the_residual_sum(
    shape: tuple[int, ...], bias: bool
) -> None:
    """Note [Norm epilogues]: a pre-norm block's backward adds the norm's
    grad_in to the residual gradient and casts the sum for the next
    product; the norm kernel stores the f32 sum and its bf16 cast, never
    grad_in (33 columns: the unvectorized path)."""
    cols = shape[-1]
    g, x, r, w, b = _randn(*shape), _randn(*shape), _randn(*shape), _randn(cols), _randn(cols)

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g, x, r, w, b = args
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [cols], w, b, 1e-5)
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            g, x, [cols], mean, rstd, w, b, [True, True, bias]
        )
        s = dx + r
        return (s, s.to(BF16), dw, db) if bias else (s, s.to(BF16), dw)

    # The cast may round differently where the f32 sums differ in their
    # last bit: bf16 tolerance for all, then the f32 sum tightly.
    compiled = _check(fn, g, x, r, w, b, kind="norm", tol=TOL[BF16])
    torch.testing.assert_close(
        compiled.run([g, x, r, w, b])[0], fn(g, x, r, w, b)[0], **TOL_SUM[F32]
    )
    (backward,) = [k for k in compiled.report()["kernels"] if "backward" in k.get("spec", "")]
    assert "epilogue:" in backward["spec"], backward["spec"]
    assert "epilogue elementwise ops" in backward["why"], backward["why"]


def test_a_pre_norm_block_trains_with_the_epilogue() -> None:
    """Note [Norm epilogues] through torch.compile: x = (inp @ W).float() and
    x + layer_norm(x) give a backward of layer-norm backward, residual sum and
    bf16 cast into the product's backward, with gradients as eager's."""
    torch.manual_seed(0)
    inp = torch.randn(512, 256, device="cuda", dtype=BF16, requires_grad=True)
    weight = torch.randn(256, 768, device="cuda", dtype=BF16, requires_grad=True)
    ln = torch.nn.LayerNorm(768, device="cuda")

    def block(inp: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = (inp @ weight).float()
        return x + ln(x)

    def grads(fn: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
        for t in (inp, weight, ln.weight, ln.bias):
            t.grad = None
        fn(inp, weight).square().sum().backward()
        return [t.grad.clone() for t in (inp, weight, ln.weight, ln.bias)]

    from tests.testing import compiled_records

    compiled = torch.compile(block, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: grads(compiled))
    want = grads(block)
    for a, e in zip(got, want, strict=True):
        assert ((a.float() - e.float()).norm() / e.float().norm()).item() < 1e-2
    (backward,) = [r for r in records if r.kind == "backward"]
    whys = [k["why"] for k in backward.compiled.report()["kernels"] if k["kind"] == "norm"]
    assert any("epilogue elementwise op" in w for w in whys), whys
    assert backward.compiled.stats()["generated_kernel_fallbacks"] == 0


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_squeeze_excitation_mean_reads_channels_last_in_memory_order(
    batch: int, dtype: torch.dtype
) -> None:
    """Note [Reductions walked in memory order]: the mean over a channels-last
    activation's spatial dims, read by a product, runs as a generated column
    reduction through the backend (strict) and matches eager."""

    class Squeeze(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.reduce = torch.nn.Conv2d(96, 24, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.reduce(x.mean((2, 3), keepdim=True))

    from tests.testing import compiled_records

    model = Squeeze().cuda().to(dtype).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 96, 28, 28, device="cuda", dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        want = model(x)
        got, records = compiled_records(lambda: compiled(x))
    torch.testing.assert_close(got, want, **TOL[dtype])
    (record,) = records
    assert record.compiled.stats()["generated_reductions_run"] == 1, record.compiled.report()


MEMORY_ORDER_REDUCTIONS: dict[str, tuple[Callable[..., Any], str]] = {
    # Note [Reductions walked in memory order]: x is channels-last [N, C, H, W],
    # scale [C, 1, 1] is read broadcast (its rsqrt is an ATen call). The axis
    # is the one of the walk [N, H, W, C] (logically each would be another).
    "mean_hw": (lambda x, s: F.silu(x * s.rsqrt()).mean((2, 3), keepdim=True), "outer"),
    "mean_hw_flat": (lambda x, s: F.silu(x * s.rsqrt()).mean((2, 3)), "outer"),
    "sum_nhw": (lambda x, s: (x * s.rsqrt()).exp().sum((0, 2, 3)), "outer"),
    "amax_c": (lambda x, s: (x * s.rsqrt()).abs().amax(1), "inner"),
    # One range in memory only; abs: no cancellation, which bf16's rounding of
    # each term would turn into a large relative error.
    "sum_cw": (lambda x, s: (x * s.rsqrt()).abs().sum((1, 3)), "inner"),
}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("name", list(MEMORY_ORDER_REDUCTIONS))
@pytest.mark.parametrize("shape", [(2, 96, 14, 14), (1, 40, 7, 9), (3, 5, 33, 2)], ids=str)
def test_channels_last_reductions_walk_memory_order(
    name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    fn, axis = MEMORY_ORDER_REDUCTIONS[name]
    x = _randn(*shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
    scale = torch.rand(shape[1], 1, 1, device="cuda", dtype=dtype) + 0.5
    compiled = _check(fn, x, scale, kind="reduction", tol=TOL_SUM[dtype])
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "reduction"]
    assert f"({axis}) with" in group["why"] and "prologue" in group["why"], group


PERIODIC_OPERANDS: dict[
    str, tuple[Callable[..., Any], Callable[[int, int], tuple[int, ...]], str]
] = {
    # Note [Periodic operands in reductions]: a batch norm's scale [C, 1, 1]
    # beside a channels-last image repeats every C elements of the walk; a
    # squeeze-excitation gate [N, C, 1, 1] in rows of C, one per image.
    "scale": (
        lambda x, s: F.silu(x * s).mean((2, 3), keepdim=True),
        lambda n, c: (c, 1, 1),
        "periodic",
    ),
    "gate": (lambda x, g: (x * g).abs().sum((0, 2, 3)), lambda n, c: (n, c, 1, 1), "periodic_rows"),
}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("name", list(PERIODIC_OPERANDS))
@pytest.mark.parametrize("shape", [(2, 96, 14, 14), (1, 40, 7, 9), (3, 5, 33, 2)], ids=str)
def test_operands_repeating_in_the_walk_are_read_periodic(
    name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """The fast variant, reading the smaller operand at i mod period, runs
    and agrees with eager; an operand of another layout on a later call
    (dense over H and W where the plan saw size 1) runs the general one."""
    fn, operand_shape, mode = PERIODIC_OPERANDS[name]
    if shape[0] == 1:
        mode = "periodic"  # one image: a gate's rows are one period
    x = _randn(*shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
    operand = torch.rand(operand_shape(shape[0], shape[1]), device="cuda", dtype=dtype) + 0.5
    before = _C.kernel_cache_stats()
    compiled = _check(fn, x, operand, kind="reduction", tol=TOL_SUM[dtype])
    # The fast variant, fetched with the graph, was all the call needed (Note
    # [Variants compiled on first use]: a general one is fetched when needed).
    assert _fetched_images(before, _C.kernel_cache_stats()) == 1
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "reduction"]
    assert mode in group["spec"].split("prologue:")[1].split("epilogue:")[0], group["spec"]
    assert "(general)" in group["kernel"], group["kernel"]  # not used yet
    # The same values at the strides of a dense [.., C, H, W] tensor: not
    # periodic in the walk (the launch checks each call's tensors).
    dense = operand.expand(*operand.shape[:-2], *shape[2:]).contiguous()
    middle = _C.kernel_cache_stats()
    got = compiled.run([x, dense.as_strided(operand.shape, dense.stride())])
    torch.testing.assert_close(got[0], fn(x, operand), **TOL_SUM[dtype])
    assert _fetched_images(middle, _C.kernel_cache_stats()) == 1
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "reduction"]
    assert "(general, used)" in group["kernel"], group["kernel"]


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape", [(2, 96, 14, 14), (3, 5, 33, 2)], ids=str)
def test_epilogue_operands_repeating_in_the_result_are_read_periodic(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """A bias [C] added to the [N, C] result of a spatial sum is read at
    o mod C by the epilogue of the fast variant, the only variant fetched."""

    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x.abs().sum((2, 3)) + b

    x = _randn(*shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
    bias = torch.randn(shape[1], device="cuda", dtype=dtype)
    before = _C.kernel_cache_stats()
    compiled = _check(fn, x, bias, kind="reduction", tol=TOL_SUM[dtype])
    assert _fetched_images(before, _C.kernel_cache_stats()) == 1
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "reduction"]
    assert "periodic" in group["spec"].split("epilogue:")[1], group["spec"]
    assert "(general)" in group["kernel"], group["kernel"]


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 6, 64), (8, 512, 1024)])
def test_one_value_a_row_beside_a_column_sum(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Note [One value a row]: an RMS norm's weight gradient reads its rstd
    [B, S, 1] at the element's row (periodic with period 1), in the one-pass,
    narrow and split forms; another layout at run time takes the general
    variant with the same result."""

    def weight_grad(g: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
        return (g * (x * rstd)).sum((0, 1))

    def in_fp32(g: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
        return weight_grad(g.float(), x.float(), rstd.float()).to(dtype)

    g, x = _randn(*shape, dtype=dtype), _randn(*shape, dtype=dtype)
    rstd = _randn(*shape[:-1], 1, dtype=dtype)
    # Against sums taken in fp32. In bf16 each of the n products summed may
    # be rounded once (eager rounds each; a kernel may store x * rstd): an
    # error of about 2^-9 * sqrt(n) for terms of unit size, so 5 sigma;
    # a wrong row of rstd is off by the size of the sum itself, sqrt(n).
    rows = math.prod(shape[:-1])
    tol = TOL_SUM[dtype] if dtype == F32 else {"rtol": 0.016, "atol": 0.01 * math.sqrt(rows)}
    compiled = _check(weight_grad, g, x, rstd, kind="reduction", tol=tol, reference=in_fp32)
    specs = [k["spec"] for k in compiled.report()["kernels"] if k["kind"] == "reduction"]
    assert any("periodic_rows" in s for s in specs), specs
    strided = _randn(*shape[:-1], 2, dtype=dtype)[..., :1]
    _check(
        weight_grad,
        g,
        x,
        strided,
        kind="reduction",
        tol=tol,
        traced_with=(g, x, rstd),
        reference=in_fp32,
    )
