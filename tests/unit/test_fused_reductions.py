"""Stage 7: reduction and norm groups on real ATen graphs (CPU machine).

Graphs come from make_fx (fake CUDA tensors) or from aot_autograd of a
function with parameters (traced on CPU, then re-propagated with fake CUDA
tensors so that the planner sees CUDA partitions). Compiling runs NVRTC, so
every planned group also proves its kernels compile (no GPU needed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from mybackend import _C
from mybackend.decompositions import decomposition_table
from mybackend.lowering import lower

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def _report(gm: torch.fx.GraphModule) -> dict[str, Any]:
    lowered = lower(gm, [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    report = dict(compiled.report())
    for kernel in report["kernels"]:
        # Every generated group compiled through NVRTC.
        if kernel["kind"] != "aten_sequence":
            assert kernel["compiled"], kernel
            assert "__global__" in kernel["source"]
    return report


def _traced(fn: Callable[..., Any], *specs: tuple[tuple[int, ...], torch.dtype]) -> dict[str, Any]:
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]
    # Decomposed as aot_autograd decomposes (F.rms_norm -> pow/mean/rsqrt/mul).
    traced = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")
    return _report(traced(*inputs))


def _aot(fn: Callable[..., Any], *inputs: torch.Tensor) -> list[dict[str, Any]]:
    """Forward and backward reports of fn under aot_autograd (our table)."""
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, _: Any) -> Any:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    compiled = aot_function(
        fn,
        fw_compiler=capture,
        bw_compiler=capture,
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
    )
    compiled(*inputs).sum().backward()
    reports = []
    for gm in graphs:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        with mode:
            fake = [
                torch.empty_strided(
                    n.meta["val"].shape,
                    n.meta["val"].stride(),
                    dtype=n.meta["val"].dtype,
                    device="cuda",
                )
                for n in placeholders
            ]
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake)
        reports.append(_report(gm))
    return reports


def _kinds(report: dict[str, Any]) -> list[str]:
    return [k["kind"] for k in report["kernels"]]


def _ops(report: dict[str, Any], kernel: dict[str, Any]) -> list[str]:
    return [report["nodes"][n]["op"] for n in kernel["nodes"]]


def _params(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(s, requires_grad=True) for s in shapes]


def test_softmax_and_log_softmax_forward_and_backward_are_norm_groups() -> None:
    for fn, names in (
        (lambda x: torch.softmax(x * 2, -1), ("softmax", "softmax_backward")),
        (lambda x: F.log_softmax(x * 2, -1), ("log_softmax", "log_softmax_backward")),
    ):
        forward, backward = _aot(fn, *_params((4, 33)))
        norms_fw = [k for k in forward["kernels"] if k["kind"] == "norm"]
        norms_bw = [k for k in backward["kernels"] if k["kind"] == "norm"]
        assert len(norms_fw) == 1 and norms_fw[0]["why"].startswith(names[0] + " "), forward
        assert len(norms_bw) == 1 and norms_bw[0]["why"].startswith(names[1]), backward


def test_layer_norm_forward_and_backward_are_norm_groups() -> None:
    forward, backward = _aot(
        lambda x, w, b: F.layer_norm(x, (16,), w, b), *_params((2, 3, 16), (16,), (16,))
    )
    assert _kinds(forward) == ["norm"], forward["kernels"]
    assert "layer_norm" in forward["kernels"][0]["spec"]
    norms = [k for k in backward["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1 and "layer_norm_backward" in norms[0]["why"], backward["kernels"]
    assert "native_layer_norm_backward" in _ops(backward, norms[0])[0]
    # Training saves mean and rstd for the backward; inference reads neither.
    assert "save_stats=1" in forward["kernels"][0]["spec"]
    inference = _traced(
        lambda x, w, b: torch.native_layer_norm(x, (16,), w, b, 1e-5)[0],
        ((2, 3, 16), F32),
        ((16,), F32),
        ((16,), F32),
    )
    (norm,) = inference["kernels"]
    assert "save_stats=0" in norm["spec"], norm["spec"]


def _layer_norm_then(cast: Callable[[torch.Tensor], Any]) -> Callable[..., Any]:
    return lambda x, w, b: cast(torch.native_layer_norm(x, (64,), w, b, 1e-5)[0])


@pytest.mark.parametrize("target", [BF16, torch.float16])
def test_layer_norm_output_cast_joins_the_norm(target: torch.dtype) -> None:
    """Note [Norm outputs in 16 bits]: the f32 result read only by a cast
    (through a view, as before a product) is stored in the cast's dtype."""
    fn = _layer_norm_then(lambda y: y.view(-1, 64).to(target))
    report = _traced(fn, ((4, 8, 64), F32), ((64,), F32), ((64,), F32))
    assert _kinds(report) == ["norm"], report["kernels"]
    (norm,) = report["kernels"]
    assert _ops(report, norm) == [
        "aten::native_layer_norm.default",
        "aten::view.default",
        "aten::_to_copy.default",
    ]
    short = {BF16: "bf16", torch.float16: "f16"}[target]
    assert f"dtype=f32 out={short}" in norm["spec"], norm["spec"]


@pytest.mark.parametrize(
    "cast",
    [
        lambda y: (y.to(BF16), y),  # the f32 result is read elsewhere too
        lambda y: y.t().to(BF16),  # the cast does not keep the rows
        lambda y: y.to(torch.float64),  # not a 16-bit store
    ],
    ids=["second-reader", "transposed", "f64"],
)
def test_layer_norm_output_cast_stays_apart(cast: Callable[[torch.Tensor], Any]) -> None:
    report = _traced(_layer_norm_then(cast), ((8, 64), F32), ((64,), F32), ((64,), F32))
    norms = [k for k in report["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1 and "out=f32" in norms[0]["spec"], norms
    assert "aten::_to_copy.default" not in _ops(report, norms[0])


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_an_inference_layer_norm_takes_its_gelu_as_prologue(dtype: torch.dtype) -> None:
    """Note [Norm prologues]: the MLP block's Linear -> GELU -> LayerNorm in
    inference: the GELU joins the norm kernel, nothing else runs."""
    report = _traced(
        lambda x, w, b: F.layer_norm(F.gelu(x), (64,), w, b),
        ((3, 64), dtype),
        ((64,), dtype),
        ((64,), dtype),
    )
    assert _kinds(report) == ["norm"], report["kernels"]
    (norm,) = report["kernels"]
    assert _ops(report, norm) == ["aten::gelu.default", "aten::native_layer_norm.default"]
    assert "prologue:" in norm["spec"] and "with 1 prologue elementwise op" in norm["why"]


def test_a_training_layer_norm_stores_its_saved_input() -> None:
    """The backward reads the GELU's result, so the forward stores it: the
    norm kernel computes it as its prologue and stores it as it goes (Note
    [A norm prologue read elsewhere]), one kernel where there were two."""
    forward, _ = _aot(
        lambda x, w, b: F.layer_norm(F.gelu(x), (16,), w, b), *_params((4, 16), (16,), (16,))
    )
    norms = [k for k in forward["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1 and "store_x=1" in norms[0]["spec"], forward["kernels"]
    assert "aten::gelu.default" in _ops(forward, norms[0])
    assert _kinds(forward) == ["norm"], forward["kernels"]


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_rms_norm_chain_is_one_norm_kernel(dtype: torch.dtype) -> None:
    report = _traced(lambda x, w: F.rms_norm(x, (64,), w, 1e-6), ((8, 64), dtype), ((64,), dtype))
    assert _kinds(report) == ["norm"], report["kernels"]
    ops = _ops(report, report["kernels"][0])
    assert "aten::mean.dim" in ops and "aten::rsqrt.default" in ops
    assert "rms_norm" in report["kernels"][0]["spec"]


def _rms_norm_f32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_rms_norm_output_cast_joins_the_norm() -> None:
    """Note [Norm outputs in 16 bits]: an f32 RMS norm whose result only the
    product's cast reads stores bf16; read elsewhere too, it stays f32."""
    report = _traced(lambda x, w: _rms_norm_f32(x, w).to(BF16), ((8, 64), F32), ((64,), F32))
    assert _kinds(report) == ["norm"], report["kernels"]
    (norm,) = report["kernels"]
    assert "aten::_to_copy.default" in _ops(report, norm)
    assert "rms_norm dtype=f32 out=bf16" in norm["spec"], norm["spec"]

    def read_twice(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = _rms_norm_f32(x, w)
        return y.to(BF16), y * 2

    both = _traced(read_twice, ((8, 64), F32), ((64,), F32))
    norms = [k for k in both["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1 and "out=f32" in norms[0]["spec"], both["kernels"]
    assert "aten::_to_copy.default" not in _ops(both, norms[0])


def test_an_rms_norm_rounding_before_its_weight_keeps_its_dtype() -> None:
    """HF Llama's `weight * h.to(dtype)` over a bf16 input rounds x * rstd to
    bf16 before the weight multiply (Note [RMS-norm rounding]); the norm's
    own dtype is bf16 and an f32 cast after it is not taken."""

    def hf(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (w * h.to(BF16)).float()

    report = _traced(hf, ((8, 64), BF16), ((64,), BF16))
    norms = [k for k in report["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1, report["kernels"]
    spec = norms[0]["spec"]
    assert "dtype=bf16 out=bf16" in spec and "round_before_weight=1" in spec, spec


def test_rms_norm_training_forward_keeps_rstd() -> None:
    forward, _ = _aot(lambda x, w: F.rms_norm(x, (32,), w, 1e-5), *_params((4, 32), (32,)))
    norms = [k for k in forward["kernels"] if k["kind"] == "norm"]
    assert len(norms) == 1, forward["kernels"]
    assert "save_stats=1" in norms[0]["spec"], norms[0]["spec"]


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("sum", lambda x: (x.exp() * 2).sum(-1).sqrt()),
        ("mean", lambda x: (x * x).mean(1, keepdim=True) + 1),
        ("amax", lambda x: x.abs().amax(-1).neg()),
        ("var", lambda x: torch.var(x * 3, dim=-1).sqrt()),
        ("std", lambda x: torch.std(x - 1, dim=0)),
        ("argmax", lambda x: (x * x).argmax(0)),
    ],
)
def test_reductions_take_prologue_and_epilogue(name: str, fn: Callable[..., Any]) -> None:
    report = _traced(fn, ((6, 40), F32))
    assert _kinds(report) == ["reduction"], report["kernels"]
    kernel = report["kernels"][0]
    assert len(kernel["nodes"]) == len(report["nodes"]), kernel
    assert "prologue" in kernel["why"]


def test_reduction_over_leading_dims_is_outer() -> None:
    report = _traced(lambda x: (x * 2).sum((0, 1)).relu(), ((4, 5, 6), BF16))
    assert _kinds(report) == ["reduction"], report["kernels"]
    assert "(outer)" in report["kernels"][0]["why"]


def test_lone_reduction_stays_aten_with_a_reason() -> None:
    report = _traced(lambda x: x.sum(-1), ((6, 40), F32))
    assert _kinds(report) == ["aten_sequence"]
    assert "lone reduction" in report["kernels"][0]["why"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda g: g.sum(0, keepdim=True),
        # A bf16 Linear's bias gradient under autocast.
        lambda g: g.sum(0, keepdim=True, dtype=torch.float32).view(-1),
        lambda g: g.amax(0),
    ],
    ids=["sum", "autocast-bias-grad", "amax"],
)
def test_lone_column_reduction_is_generated(fn: Callable[..., Any]) -> None:
    """Note [Lone column reductions]: ATen's column reductions are slow, so a
    lone reduction over a leading dim becomes a (split) outer reduction."""
    report = _traced(fn, ((1024, 48), BF16))
    reductions = [k for k in report["kernels"] if k["kind"] == "reduction"]
    assert len(reductions) == 1, report["kernels"]
    assert "(outer)" in reductions[0]["why"], reductions[0]["why"]
    assert "0 prologue and 0 epilogue" in reductions[0]["why"], reductions[0]["why"]


def test_lone_column_reduction_over_a_transposed_input_stays_aten() -> None:
    """A column sum of a transposed tensor is a row sum in memory (Note
    [Reductions walked in memory order]): lone, it is ATen's kernel, which
    reads it in memory order too."""
    report = _traced(lambda g: g.t().sum(0), ((48, 1024), BF16))
    assert _kinds(report) == ["aten_sequence"], report["kernels"]
    assert "a lone reduction" in report["kernels"][0]["why"]


def test_shared_producer_is_not_prologue() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = x.exp()
        return e * 2, e.sum(-1) + 1

    report = _traced(fn, ((6, 40), F16))
    reductions = [k for k in report["kernels"] if k["kind"] == "reduction"]
    assert len(reductions) == 1, report["kernels"]
    assert _ops(report, reductions[0]) == ["aten::sum.dim_IntList", "aten::add.Tensor"]
    assert "0 prologue and 1 epilogue" in reductions[0]["why"]
