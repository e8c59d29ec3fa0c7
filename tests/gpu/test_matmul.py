"""GPU-marked: matrix products through cuBLASLt with fused epilogues (CUDA
engine II) against eager.

Every test asserts that cuBLASLt groups actually ran (ExecutionStats'
matmul_groups_run, with no matmul_fallbacks), so none can pass by quietly
running the ATen form; the one test of an operand cuBLASLt cannot read
asserts the fallback instead.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.decompositions import decomposition_table
from mybackend.lowering import lower
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

M, K, N, BATCH = 64, 48, 80, 3

# name -> (dtype, TF32 allowed for cuBLAS, tolerance)
PRECISIONS: dict[str, tuple[torch.dtype, bool, dict[str, float]]] = {
    "bf16": (torch.bfloat16, False, {"rtol": 2e-2, "atol": 2e-2}),
    # Weight gradients sum many fp16 products whose inputs (the upstream
    # gradient, computed by a fused kernel that rounds once) may differ from
    # eager's by one rounding each: an absolute error near 1e-2 on sums of
    # magnitude ~5, as bf16's 2e-2 allows for the same reason.
    "fp16": (torch.float16, False, {"rtol": 1e-2, "atol": 1e-2}),
    "fp32": (torch.float32, False, {"rtol": 1e-4, "atol": 1e-4}),
    "tf32": (torch.float32, True, {"rtol": 1e-2, "atol": 2e-2}),
}

# epilogue in the test -> the cuBLASLt epilogue the plan must use
EPILOGUES = {
    "none": "DEFAULT",
    "bias": "BIAS",
    "relu": "RELU_BIAS",
    "gelu_tanh": "GELU_BIAS",
    "gelu_none": "BIAS",  # erf GELU is never the GELU epilogue: it stays an ATen call
}


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if allowed else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.fixture(params=list(PRECISIONS))
def precision(request: pytest.FixtureRequest) -> Iterator[tuple[torch.dtype, dict[str, float]]]:
    dtype, tf32, tol = PRECISIONS[request.param]
    with _tf32(tf32):
        yield dtype, tol


def _activation(y: torch.Tensor, epilogue: str) -> torch.Tensor:
    if epilogue == "relu":
        return torch.relu(y)
    if epilogue == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if epilogue == "gelu_none":
        return F.gelu(y)
    return y


def _randn(*shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def _run(
    fn: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    tol: dict[str, float],
    *,
    epilogue: str,
    decompose: bool = True,
) -> Any:
    """Compiles fn's ATen graph, checks the plan and the result, returns the compiled graph."""
    table = decomposition_table() if decompose else None
    gm = make_fx(fn, decomposition_table=table, tracing_mode="fake")(*inputs)
    lowered = lower(gm, [])
    compiled = _C.compile(lowered.graph, {}, lowered.run_python_node)
    matmuls = [k for k in compiled.report()["kernels"] if k["kind"] == "matmul"]
    assert any(f"(cublaslt {epilogue})" in k["spec"] for k in matmuls), matmuls
    got = compiled.run(list(inputs) + lowered.constants)[0]
    expected = fn(*inputs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, **tol)
    stats = compiled.stats()
    assert stats["matmul_groups_run"] == len(matmuls), (stats, matmuls)
    assert stats["matmul_fallbacks"] == 0, [k.get("problem") for k in matmuls]
    return compiled


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
@pytest.mark.parametrize("form", ["mm", "addmm", "linear_2d", "linear_3d", "transposed"])
def test_2d_products(form: str, epilogue: str, precision: Any) -> None:
    dtype, tol = precision
    bias = _randn(N, dtype=dtype, scale=0.5) if epilogue != "none" else None
    scale = K**-0.5
    if form in ("mm", "addmm"):
        x, w = _randn(M, K, dtype=dtype), _randn(K, N, dtype=dtype, scale=scale)

        def product(x: torch.Tensor, w: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
            if form == "addmm" and b:
                return torch.addmm(b[0], x, w)
            return x @ w + b[0] if b else x @ w

    elif form == "transposed":  # both operands stored transposed: read in place
        x, w = _randn(K, M, dtype=dtype), _randn(N, K, dtype=dtype, scale=scale)

        def product(x: torch.Tensor, w: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
            y = x.t() @ w.t()
            return y + b[0] if b else y

    else:
        shape = (M, K) if form == "linear_2d" else (BATCH, M, K)
        x, w = _randn(*shape, dtype=dtype), _randn(N, K, dtype=dtype, scale=scale)

        def product(x: torch.Tensor, w: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
            return F.linear(x, w, b[0] if b else None)

    def fn(*args: torch.Tensor) -> torch.Tensor:
        return _activation(product(*args), epilogue)

    inputs = [x, w] + ([bias] if bias is not None else [])
    _run(fn, inputs, tol, epilogue=EPILOGUES[epilogue])


def test_addmm_with_a_full_c_and_scalars(precision: Any) -> None:
    dtype, tol = precision
    c, x = _randn(M, N, dtype=dtype), _randn(M, K, dtype=dtype)
    w = _randn(K, N, dtype=dtype, scale=K**-0.5)

    def fn(c: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(c, x, w, beta=0.5, alpha=2.0))

    _run(fn, [c, x, w], tol, epilogue="RELU")


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "gelu_tanh"])
@pytest.mark.parametrize("form", ["bmm", "bmm_transposed", "baddbmm"])
def test_batched_products(form: str, epilogue: str, precision: Any) -> None:
    dtype, tol = precision
    a = _randn(BATCH, M, K, dtype=dtype)
    b = _randn(BATCH, N, K, dtype=dtype, scale=K**-0.5)  # stored [.., N, K]
    if form != "bmm_transposed":
        b = b.transpose(1, 2).contiguous()
    bias = _randn(N, dtype=dtype, scale=0.5)

    def product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if form == "baddbmm":
            if epilogue == "none":
                return torch.baddbmm(bias.expand(BATCH, M, N), a, b, beta=0.5, alpha=1.5)
            return torch.baddbmm(bias, a, b)
        y = torch.bmm(a, b.transpose(1, 2) if form == "bmm_transposed" else b)
        return y if epilogue == "none" else y + bias

    def fn(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return _activation(product(a, b, bias), epilogue)

    expected = EPILOGUES[epilogue]
    if form == "baddbmm" and epilogue == "none":
        expected = "DEFAULT"  # self is C, scaled by beta
    # baddbmm traced as it is (aot's decomposition would turn it into bmm).
    _run(fn, [a, b, bias], tol, epilogue=expected, decompose=form != "baddbmm")


def test_non_contiguous_operands_read_in_place(precision: Any) -> None:
    dtype, tol = precision
    base = _randn(2 * M, K + 16, dtype=dtype)
    x = base[::2, :K]  # row stride 2 (K + 16): a matrix with a larger leading dimension
    w = _randn(N, K, dtype=dtype, scale=K**-0.5)
    b = _randn(N, dtype=dtype)
    assert not x.is_contiguous()
    _run(lambda x, w, b: F.linear(x, w, b), [x, w, b], tol, epilogue="BIAS")


def test_an_operand_cublaslt_cannot_read_falls_back_to_aten() -> None:
    x = _randn(M, 2 * K, dtype=torch.bfloat16)[:, ::2]  # no unit stride at all
    w = _randn(K, N, dtype=torch.bfloat16, scale=K**-0.5)
    gm = make_fx(torch.mm, tracing_mode="fake")(x, w)
    lowered = lower(gm, [])
    compiled = _C.compile(lowered.graph, {}, None)
    torch.testing.assert_close(compiled.run([x, w])[0], x @ w, rtol=2e-2, atol=2e-2)
    stats = compiled.stats()
    assert stats["matmul_fallbacks"] == 1 and stats["matmul_groups_run"] == 0, stats
    (matmul,) = [k for k in compiled.report()["kernels"] if k["kind"] == "matmul"]
    assert "strides" in matmul["problem"], matmul


def _train_step(model: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().requires_grad_()
    model(x).backward(grad)
    return [x.grad] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("shape", [(M, K), (BATCH, M, K)], ids=["2d", "3d"])
def test_linear_backward_fuses_the_bias_gradient(shape: tuple[int, ...], precision: Any) -> None:
    dtype, tol = precision
    eager = nn.Linear(K, N, device="cuda", dtype=dtype)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = _randn(*shape, dtype=dtype)
    grad = _randn(*shape[:-1], N, dtype=dtype)
    want = _train_step(eager, x, grad)
    got, records = compiled_records(lambda: _train_step(compiled, x, grad))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tol)
    backward = [r for r in records if r.kind == "backward"]
    assert len(backward) == 1
    specs = [k["spec"] for k in backward[0].core_report["kernels"] if k["kind"] == "matmul"]
    # fp16 keeps the bias gradient a separate reduction (matmul_planner.cpp).
    fused = any("(cublaslt BGRADB)" in s for s in specs)
    assert fused == (dtype != torch.float16), specs
    stats = backward[0].compiled.stats()
    assert stats["matmul_groups_run"] == len(specs) >= 2 and stats["matmul_fallbacks"] == 0, stats


@pytest.mark.parametrize("residual_layout", ["contiguous", "transposed"])
def test_a_residual_sum_runs_as_c_of_the_product(residual_layout: str, precision: Any) -> None:
    """Note [Residual sums in the product]: addmm + bias, views, a clone and
    the residual add are one cuBLASLt call (D = AB + C + bias) for any
    residual layout (a non-contiguous one is copied first), and the sum is
    what eager computes."""
    dtype, tol = precision
    x = _randn(BATCH, M, K, dtype=dtype)
    w = _randn(N, K, dtype=dtype, scale=K**-0.5)
    b = _randn(N, dtype=dtype, scale=0.5)
    r = _randn(BATCH, M, N, dtype=dtype)
    if residual_layout == "transposed":
        r = _randn(BATCH, N, M, dtype=dtype).transpose(1, 2)

    def block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> Any:
        projected = torch.addmm(b, x.view(-1, K), w.t()).view(BATCH, M, N).clone()
        return r + projected

    compiled = _run(block, [x, w, b, r], tol, epilogue="BIAS")
    (mm,) = [k for k in compiled.report()["kernels"] if k["kind"] == "matmul"]
    assert "residual=" in mm["spec"] and "aten::add.Tensor" in [
        compiled.report()["nodes"][n]["op"] for n in mm["nodes"]
    ]


class _Conv1D(nn.Module):
    """GPT-2's linear layer (transformers' Conv1D): addmm with the f32 bias."""

    def __init__(self, features_in: int, features_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features_in, features_out, device="cuda") * 0.1)
        self.bias = nn.Parameter(torch.randn(features_out, device="cuda"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (*x.size()[:-1], self.weight.size(-1))
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(shape)


def test_autocast_bias_gradient_summed_in_f32_is_the_bgrad_output() -> None:
    """Note [Bias gradients summed in f32]: under CUDA autocast the bias
    gradient is an f32 sum cast to bf16; it joins the weight gradient's
    product as BGRAD and matches eager."""
    eager = _Conv1D(K, N)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = _randn(BATCH, M, K, dtype=torch.float32)
    grad = _randn(BATCH, M, N, dtype=torch.float32)

    def step(m: nn.Module) -> list[torch.Tensor]:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return _train_step(m, x, grad)

    want = step(eager)
    got, records = compiled_records(lambda: step(compiled))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
    (backward,) = [r for r in records if r.kind == "backward"]
    report = backward.core_report
    grads = [k for k in report["kernels"] if k["kind"] == "matmul" and "BGRAD" in k["spec"]]
    assert len(grads) == 1, [k["spec"] for k in report["kernels"]]
    ops = [report["nodes"][n]["op"] for n in grads[0]["nodes"]]
    assert "aten::sum.dim_IntList" in ops and "aten::_to_copy.default" in ops, ops
    assert not any(k["kind"] == "reduction" for k in report["kernels"]), report["kernels"]


def test_mlp_block_compiled_end_to_end_runs_cublaslt() -> None:
    model = (
        nn.Sequential(nn.Linear(K, N), nn.GELU(approximate="tanh"), nn.Linear(N, K), nn.ReLU())
        .cuda()
        .to(torch.bfloat16)
        .eval()
    )
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = _randn(BATCH, M, K, dtype=torch.bfloat16)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(got, model(x), rtol=2e-2, atol=2e-2)
    stats = records[0].compiled.stats()
    assert stats["matmul_groups_run"] == 2 and stats["matmul_fallbacks"] == 0, stats
    specs = [k["spec"] for k in records[0].core_report["kernels"] if k["kind"] == "matmul"]
    assert any("GELU_BIAS" in s for s in specs) and any("RELU_BIAS" in s for s in specs)


def test_the_algorithm_cache_answers_repeated_shapes() -> None:
    x = _randn(M, K, dtype=torch.bfloat16)
    w = _randn(N, K, dtype=torch.bfloat16)
    b = _randn(N, dtype=torch.bfloat16)
    compiled = _run(
        lambda x, w, b: F.linear(x, w, b), [x, w, b], PRECISIONS["bf16"][2], epilogue="BIAS"
    )
    before = _C.cublaslt_cache_stats()
    compiled.run([x, w, b])
    after = _C.cublaslt_cache_stats()
    # Note [Prepared products]: the group's own plan answers, not the cache.
    assert after["reused"] == before["reused"] + 1, (before, after)
    assert after["hits"] == before["hits"] and after["entries"] == before["entries"]
    # A new bias (a new pointer, same alignment) reuses the plan with its own pointer.
    b2 = _randn(N, dtype=torch.bfloat16)
    got = compiled.run([x, w, b2])[0]
    torch.testing.assert_close(got, F.linear(x, w, b2), rtol=2e-2, atol=2e-2)
    # An operand of another alignment is another signature: a plan of its own.
    x_offset = _randn(M * K + 1, dtype=torch.bfloat16)[1:].view(M, K)
    got = compiled.run([x_offset, w, b])[0]
    torch.testing.assert_close(got, F.linear(x_offset, w, b), rtol=2e-2, atol=2e-2)
    assert _C.cublaslt_cache_stats()["entries"] == after["entries"] + 1


def test_an_upcast_product_is_written_in_f32() -> None:
    """Note [Products written in f32]: one cuBLASLt call writes the f32
    result; rounded once, it is at least as close to f32 arithmetic as
    eager's bf16 product followed by an upcast."""
    a = _randn(M, K, dtype=torch.bfloat16)
    b = _randn(K, N, dtype=torch.bfloat16)
    compiled = _run(lambda a, b: (a @ b).float(), [a, b], PRECISIONS["bf16"][2], epilogue="DEFAULT")
    kernels = compiled.report()["kernels"]
    assert [k["kind"] for k in kernels] == ["matmul"], kernels
    got = compiled.run([a, b])[0]
    exact = a.double() @ b.double()
    assert (got.double() - exact).abs().max() <= ((a @ b).double() - exact).abs().max()


def test_dynamic_batch_sizes_and_cuda_graphs() -> None:
    model = nn.Sequential(nn.Linear(K, N), nn.GELU(approximate="tanh")).cuda().eval()
    dynamic = torch.compile(model, backend="mybackend", dynamic=True, options={"strict": True})
    graphs = torch.compile(model, backend="mybackend", mode="reduce-overhead")
    records = []
    with torch.no_grad():
        for rows in (3, 5, 129):
            x = torch.randn(2, rows, K, device="cuda")
            got, new = compiled_records(lambda x=x: dynamic(x))
            records += new
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
        runs = sum(r.compiled.stats()["matmul_groups_run"] for r in records)
        assert runs == 3, [r.compiled.stats() for r in records]  # one product per call
        for _ in range(3):
            x = torch.randn(8, K, device="cuda")
            got, new = compiled_records(lambda x=x: graphs(x))
            records += new
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    captured = [r.compiled.stats() for r in records[-1:]]
    assert captured[0]["cuda_graph_captures"] == 1 and captured[0]["matmul_groups_run"] >= 1


def test_bare_cublaslt_binding_matches_linear_gelu() -> None:
    x = _randn(M, K, dtype=torch.bfloat16)
    w = _randn(N, K, dtype=torch.bfloat16, scale=K**-0.5)
    b = _randn(N, dtype=torch.bfloat16)
    got = _C._cublaslt_linear(x, w, b, "gelu_tanh_bias")
    torch.testing.assert_close(
        got, F.gelu(F.linear(x, w, b), approximate="tanh"), rtol=2e-2, atol=2e-2
    )


@pytest.mark.parametrize("mode", ["max-autotune-no-cudagraphs", "max-autotune"])
def test_max_autotune_times_the_candidates(mode: str) -> None:
    """Note [Timed algorithm choice]: timing happens outside capture, once per
    signature, and addmm's C (copied into D) is not accumulated twice."""
    rows = M + (8 if mode == "max-autotune" else 0)  # signatures of its own per mode
    model = nn.Sequential(nn.Linear(K, N), nn.GELU(approximate="tanh")).cuda().to(torch.bfloat16)
    c = _randn(rows, N, dtype=torch.bfloat16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return model(x) + torch.addmm(c, x, model[0].weight.t(), beta=0.5)

    compiled = torch.compile(fn, backend="mybackend", mode=mode)
    before = _C.cublaslt_cache_stats()
    records: list[Any] = []
    with torch.no_grad():
        for _ in range(3):  # warm-up (timed), then capture and replay with max-autotune
            x = _randn(rows, K, dtype=torch.bfloat16)
            got, new = compiled_records(lambda x=x: compiled(x))
            records += new
            torch.testing.assert_close(got, fn(x), rtol=2e-2, atol=2e-2)
    after = _C.cublaslt_cache_stats()
    specs = [k["spec"] for r in records for k in r.core_report["kernels"] if k["kind"] == "matmul"]
    assert len(specs) == 2 and all("algorithm=timed" in s for s in specs), specs
    # Each product timed once (if cuBLASLt offered more than one candidate), never again.
    assert 1 <= after["timed"] - before["timed"] <= 2, (before, after)
    # Each timed choice is on record: the kept candidate is the fastest timed.
    choices = _C.cublaslt_timed_choices()[-(after["timed"] - before["timed"]) :]
    for choice in choices:
        times = [ms for _, ms in choice["candidates"]]
        assert len(times) > 1 and all(
            config.startswith("algo ") for config, _ in choice["candidates"]
        )
        assert times[choice["chosen"]] == min(t for t in times if t >= 0), choice
    # The heuristic's configurations are timed without workspace too (no memset
    # before each launch); Hopper's kernels for these bf16 products have such.
    configs = [config for choice in choices for config, _ in choice["candidates"]]
    assert any(config.endswith(" workspace 0") for config in configs), configs


def _window_scores(qkv: torch.Tensor) -> torch.Tensor:
    b, n, _ = qkv.shape
    q, k, _v = qkv.reshape(b, n, 3, 4, 32).permute(2, 0, 3, 1, 4).unbind(0)
    return (q * 0.125) @ k.transpose(-2, -1)


def test_a_transposed_key_is_copied_untransposed_and_read_transposed() -> None:
    """Note [Transposed operands copied untransposed]: k is copied with its
    head dim innermost (a generated copy) and the batched product reads
    its transpose in place; no ATen copy is left."""
    compiled = torch.compile(_window_scores, backend="mybackend", options={"strict": True})
    qkv = _randn(64, 49, 3 * 4 * 32, dtype=torch.bfloat16)
    with torch.no_grad():
        got, records = compiled_records(lambda: compiled(qkv))
        torch.testing.assert_close(got, _window_scores(qkv), rtol=2e-2, atol=2e-2)
    stats = records[0].compiled.stats()
    assert stats["matmul_groups_run"] == 1 and stats["matmul_fallbacks"] == 0, stats
    report = records[0].core_report
    aten_ops = [
        report["nodes"][n]["op"]
        for k in report["kernels"]
        if k["kind"] == "aten_sequence"
        for n in k["nodes"]
    ]
    assert "aten::clone.default" not in aten_ops, report["kernels"]
    assert stats["generated_pointwise_run"] >= 1, stats
