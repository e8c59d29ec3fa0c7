"""Stage 7: the matmul planner (CUDA engine II) on ATen graphs of real modules.

The graphs come from aot_autograd (our decomposition table, min-cut
partitioner) on small CPU tensors, then are retraced with fake CUDA tensors
so the planner sees CUDA partitions; compiling needs no GPU (cuBLASLt is
first asked on the first run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.decompositions import decomposition_table
from mybackend.lowering import lower

BF16 = torch.bfloat16


class _TupleOut(nn.Module):
    """aot_module_simplified wants tuple outputs."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.inner(*args),)


def _aot_graphs(module: nn.Module, *inputs: torch.Tensor) -> dict[str, torch.fx.GraphModule]:
    """aot_autograd's ATen graphs (inference, or forward and backward) on the CPU."""
    graphs: dict[str, torch.fx.GraphModule] = {}

    def capture(kind: str) -> Callable[..., Any]:
        def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            graphs[kind] = gm
            return make_boxed_func(gm)

        return compiler

    compiled = aot_module_simplified(
        _TupleOut(module),
        list(inputs),
        fw_compiler=capture("forward"),
        bw_compiler=capture("backward"),
        inference_compiler=capture("inference"),
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
    )
    out = compiled(*inputs)[0]
    if out.requires_grad:
        out.sum().backward()
    return graphs


def _on_fake_cuda(fn: Callable[..., Any], *examples: torch.Tensor, decompose: bool = False) -> Any:
    """Retraces fn (an ATen graph or a function) with fake CUDA tensors like `examples`."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        args = [
            torch.empty_strided(e.shape, e.stride(), dtype=e.dtype, device="cuda") for e in examples
        ]
    table = decomposition_table() if decompose else None
    return make_fx(fn, decomposition_table=table, tracing_mode="fake")(*args)


def _graph_inputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    return [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]


def _kernels(gm: torch.fx.GraphModule, **options: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The kernel groups of a graph retraced on fake CUDA, and its node ops."""
    cuda_gm = _on_fake_cuda(gm, *_graph_inputs(gm))
    lowered = lower(cuda_gm, [])
    report = _C.compile(lowered.graph, options, lowered.run_python_node).report()
    return list(report["kernels"]), [n["op"] for n in report["nodes"]]


def _matmuls(gm: torch.fx.GraphModule, **options: Any) -> list[dict[str, Any]]:
    kernels, ops = _kernels(gm, **options)
    found = [k for k in kernels if k["kind"] == "matmul"]
    for k in found:
        k["ops"] = [ops[n] for n in k["nodes"]]
    return found


def _linear(act: nn.Module | None = None, bias: bool = True) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(8, 16, bias=bias, dtype=BF16)]
    return nn.Sequential(*layers, *([act] if act is not None else []))


def _inference(module: nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    with torch.no_grad():
        return _aot_graphs(module, *inputs)["inference"]


X2 = torch.randn(4, 8, dtype=BF16)
X3 = torch.randn(2, 3, 8, dtype=BF16)


def test_linear_with_bias_is_addmm_with_bias_epilogue_and_weight_read_transposed() -> None:
    (mm,) = _matmuls(_inference(_linear(), X2))
    assert mm["ops"] == ["aten::permute.default", "aten::addmm.default"]
    assert "epilogue=bias (cublaslt BIAS)" in mm["spec"]
    assert "^T" in mm["spec"].split("mat2=")[1].split()[0]  # the weight, not a copy
    assert "transposed operands read in place" in mm["why"]
    assert mm["compiled"] is True
    assert mm["kernel"] == "cublaslt: addmm.default epilogue BIAS"


def test_linear_without_bias_is_a_plain_mm() -> None:
    (mm,) = _matmuls(_inference(_linear(bias=False), X2))
    assert mm["ops"] == ["aten::permute.default", "aten::mm.default"]
    assert "epilogue=none (cublaslt DEFAULT)" in mm["spec"]


def test_linear_relu_fuses_bias_and_relu() -> None:
    graphs = _aot_graphs(_linear(nn.ReLU()), X2.clone().requires_grad_())
    (mm,) = _matmuls(graphs["forward"])  # relu's output is saved; the product is not
    assert mm["ops"][-1] == "aten::relu.default"
    assert "epilogue=relu_bias (cublaslt RELU_BIAS)" in mm["spec"]
    (inference,) = _matmuls(_inference(_linear(nn.ReLU()), X2))
    assert "cublaslt RELU_BIAS" in inference["spec"]


def test_linear_tanh_gelu_fuses_gelu_bias_at_inference_only() -> None:
    (mm,) = _matmuls(_inference(_linear(nn.GELU(approximate="tanh")), X2))
    assert mm["ops"][-1] == "aten::gelu.default"
    assert "cublaslt GELU_BIAS" in mm["spec"]
    # Training saves the pre-activation for gelu_backward: the product has a
    # second reader, so only the bias is fused.
    forward = _aot_graphs(_linear(nn.GELU(approximate="tanh")), X2.clone().requires_grad_())
    (train,) = _matmuls(forward["forward"])
    assert train["ops"][-1] == "aten::addmm.default"
    assert "cublaslt BIAS)" in train["spec"]


def test_erf_gelu_never_uses_the_gelu_epilogue() -> None:
    (mm,) = _matmuls(_inference(_linear(nn.GELU()), X2))
    assert "aten::gelu.default" not in mm["ops"]
    assert "cublaslt BIAS)" in mm["spec"]
    assert "tanh approximation" in mm["why"]


def test_linear_on_3d_input_sees_through_the_views() -> None:
    (mm,) = _matmuls(_inference(_linear(nn.GELU(approximate="tanh")), X3))
    assert mm["ops"] == [
        "aten::permute.default",
        "aten::addmm.default",
        "aten::view.default",
        "aten::gelu.default",
    ]
    assert "cublaslt GELU_BIAS" in mm["spec"]


def test_linear_backward_fuses_the_bias_gradient() -> None:
    graphs = _aot_graphs(_linear(), X2.clone().requires_grad_())
    found = _matmuls(graphs["backward"])
    weight_grad = [k for k in found if "aten::sum.dim_IntList" in k["ops"]]
    assert len(weight_grad) == 1, found
    assert "cublaslt BGRADB" in weight_grad[0]["spec"]
    assert "bias_grad=%" in weight_grad[0]["spec"]
    # The input gradient (grad · weight) is a second, plain product.
    assert len(found) == 2
    assert any("cublaslt DEFAULT" in k["spec"] for k in found)


def test_linear_3d_backward_fuses_the_bias_gradient() -> None:
    graphs = _aot_graphs(_linear(nn.GELU(approximate="tanh")), X3.clone().requires_grad_())
    specs = [k["spec"] for k in _matmuls(graphs["backward"])]
    assert any("cublaslt BGRADB" in s for s in specs), specs


def test_fp16_bias_gradient_is_not_a_cublaslt_epilogue() -> None:
    model = _linear().half()
    graphs = _aot_graphs(model, X3.clone().half().requires_grad_())
    specs = [k["spec"] for k in _matmuls(graphs["backward"])]
    assert specs and not any("BGRAD" in s for s in specs), specs


def test_bmm_with_a_transposed_operand() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    gm = _on_fake_cuda(lambda a, b: torch.bmm(a, b.transpose(1, 2)), a, b, decompose=True)
    (mm,) = _matmuls(gm)
    assert mm["ops"] == ["aten::permute.default", "aten::bmm.default"]
    assert "batched" in mm["spec"] and "mat2=%1^T" in mm["spec"]


def test_baddbmm_keeps_self_as_c_with_alpha_and_beta() -> None:
    c, a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    gm = _on_fake_cuda(lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), c, a, b)
    (mm,) = _matmuls(gm)
    assert mm["ops"] == ["aten::baddbmm.default"]
    assert "alpha=2 c=%0 beta=0.5" in mm["spec"]
    # aot's decomposition turns baddbmm into bmm and pointwise ops.
    decomposed = _on_fake_cuda(
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), c, a, b, decompose=True
    )
    (bmm,) = _matmuls(decomposed)
    assert bmm["ops"] == ["aten::bmm.default"]


def test_mm_then_add_of_a_row_vector_is_a_bias_epilogue() -> None:
    x, w, bias = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)
    gm = _on_fake_cuda(lambda x, w, b: torch.relu(x @ w + b), x, w, bias, decompose=True)
    (mm,) = _matmuls(gm)
    assert mm["ops"] == ["aten::mm.default", "aten::add.Tensor", "aten::relu.default"]
    assert "cublaslt RELU_BIAS" in mm["spec"]


def _projection_plus_residual(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor
) -> torch.Tensor:
    # A transformer block's output projection: addmm, views, the clone eval
    # dropout leaves, then the residual sum (read twice, as the next block does).
    projected = torch.addmm(b, x.view(-1, 8), w.t()).view(2, 3, 16).clone()
    s = r + projected
    return s, s.sum()


def test_a_residual_sum_is_the_products_c() -> None:
    """Note [Residual sums in the product]: addmm with its bias, the views,
    the clone and the residual add are one cuBLASLt call with C = residual."""
    x, w, b, r = (torch.randn(*s, dtype=BF16) for s in ((2, 3, 8), (16, 8), (16,), (2, 3, 16)))
    (mm,) = _matmuls(_on_fake_cuda(_projection_plus_residual, x, w, b, r, decompose=True))
    assert mm["ops"] == [
        "aten::permute.default",
        "aten::addmm.default",
        "aten::view.default",
        "aten::clone.default",
        "aten::add.Tensor",
    ]
    assert "residual=%3 beta=1" in mm["spec"] and "cublaslt BIAS" in mm["spec"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w, r: torch.relu(x @ w) + r,  # the activation would apply to the sum
        lambda x, w, r: (x @ w) + r.float(),  # the sum is f32, the product bf16
        lambda x, w, r: (x @ w) + r[:1],  # a broadcast residual is not D's shape
        lambda x, w, r: (x @ w) - r,  # not a sum
    ],
    ids=["activation", "dtype", "broadcast", "sub"],
)
def test_a_residual_stays_apart_when_c_cannot_hold_it(fn: Callable[..., Any]) -> None:
    x, w = torch.randn(4, 8, dtype=BF16), torch.randn(8, 16, dtype=BF16)
    r = torch.randn(4, 16, dtype=BF16)
    (mm,) = _matmuls(_on_fake_cuda(fn, x, w, r, decompose=True))
    assert "residual" not in mm["spec"] and "c=" not in mm["spec"], mm["spec"]
    assert "aten::add.Tensor" not in mm["ops"] and "aten::sub.Tensor" not in mm["ops"]


def test_a_bias_gradient_summed_in_f32_and_cast_back_is_the_bgrad_output() -> None:
    """Note [Bias gradients summed in f32]: CUDA autocast's bias gradient is
    sum(G, [0], keepdim, dtype=f32), a view and a cast to bf16: the three join
    the weight gradient's product as its BGRAD output."""

    def backward(g: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weight_grad = g.t() @ x
        bias_grad = torch.sum(g, [0], keepdim=True, dtype=torch.float32).view(16).to(BF16)
        return weight_grad, bias_grad.float()

    g, x = torch.randn(6, 16, dtype=BF16), torch.randn(6, 8, dtype=BF16)
    (mm,) = _matmuls(_on_fake_cuda(backward, g, x, decompose=True))
    assert mm["ops"] == [
        "aten::permute.default",
        "aten::mm.default",
        "aten::sum.dim_IntList",
        "aten::view.default",
        "aten::_to_copy.default",
    ]
    assert "cublaslt BGRADB" in mm["spec"]
    # Without the cast back the f32 sum stays a reduction.
    (plain,) = _matmuls(
        _on_fake_cuda(lambda g, x: (g.t() @ x, g.sum(0, dtype=torch.float32)), g, x)
    )
    assert "BGRAD" not in plain["spec"]


def test_an_upcast_product_is_written_in_f32() -> None:
    """Note [Products written in f32]: the upcast joins the product (through
    views), so cuBLASLt writes D in f32 and no cast kernel runs."""
    a, b = torch.randn(6, 8, dtype=BF16), torch.randn(8, 4, dtype=BF16)
    gm = _on_fake_cuda(lambda a, b: (a @ b).view(3, 2, 4).float(), a, b, decompose=True)
    (mm,) = _matmuls(gm)
    assert mm["ops"] == ["aten::mm.default", "aten::view.default", "aten::_to_copy.default"]
    assert "out_dtype=f32" in mm["spec"] and "written in f32" in mm["why"]


def test_an_upcast_read_by_elementwise_ops_rides_into_their_kernel() -> None:
    """Note [Products written in f32]: with generated kernels, an upcast that
    only elementwise ops read joins their kernel, which reads the 16-bit
    product (ViT's GELU backward); without them it joins the product."""
    a, b = torch.randn(6, 8, dtype=BF16), torch.randn(8, 4, dtype=BF16)
    x = torch.randn(3, 2, 4, dtype=BF16)

    def gelu_backward_like(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        grad = (a @ b).view(3, 2, 4).float()
        return (grad * torch.erf(x.float())).to(BF16)

    gm = _on_fake_cuda(gelu_backward_like, a, b, x, decompose=True)
    kernels, ops = _kernels(gm, generated_kernels=True)
    (mm,) = [k for k in kernels if k["kind"] == "matmul"]
    assert "out_dtype" not in mm["spec"], mm["spec"]
    (pointwise,) = [k for k in kernels if k["kind"] == "pointwise"]
    assert "aten::_to_copy.default" in [ops[n] for n in pointwise["nodes"]]
    assert "f32" not in [
        line.split()[1] for line in pointwise["spec"].splitlines() if line.strip().startswith("in")
    ]
    (mm,) = _matmuls(gm)  # generated kernels off: the upcast joins the product
    assert "out_dtype=f32" in mm["spec"], mm["spec"]


def _with_product(product: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return product.float(), product


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.relu(a @ b).float(),  # an epilogue already holds D
        lambda a, b: _with_product(a @ b),  # the 16-bit product is read elsewhere
        lambda a, b: (a @ b).double(),  # only f32 is a cuBLASLt output type here
        lambda a, b: (a @ b).t().float(),  # the cast's output is not D's layout
    ],
    ids=["epilogue", "second-reader", "f64", "transposed"],
)
def test_an_upcast_stays_apart_when_d_cannot_be_f32(fn: Callable[..., Any]) -> None:
    a, b = torch.randn(6, 8, dtype=BF16), torch.randn(8, 4, dtype=BF16)
    for mm in _matmuls(_on_fake_cuda(fn, a, b, decompose=True)):
        assert "out_dtype" not in mm["spec"], mm["spec"]
        assert "aten::_to_copy.default" not in mm["ops"]


def test_autocast_weight_gradient_is_written_in_f32() -> None:
    """Under autocast a Linear's weight gradient is mm in bf16, then an upcast
    to the f32 parameter: one cuBLASLt call writes it in f32."""

    class Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=BF16):
                return self.linear(x)

    graphs = _aot_graphs(Autocast(), torch.randn(4, 8, requires_grad=True))
    products = _matmuls(graphs["backward"])
    written_f32 = [mm for mm in products if "out_dtype=f32" in mm["spec"]]
    assert len(written_f32) == 1, [mm["spec"] for mm in products]
    assert "aten::_to_copy.default" in written_f32[0]["ops"]


@pytest.mark.parametrize(
    "options", [{"cublaslt": False}, {"disabled_op_classes": ["matmul"]}], ids=["off", "disabled"]
)
def test_matmul_groups_can_be_turned_off(options: dict[str, Any]) -> None:
    assert _matmuls(_inference(_linear(nn.ReLU()), X2), **options) == []


def test_cpu_graphs_have_no_matmul_groups() -> None:
    graph = _inference(_linear(nn.ReLU()), X2)
    lowered = lower(graph, [])
    kernels = _C.compile(lowered.graph, {}, lowered.run_python_node).report()["kernels"]
    assert [k["kind"] for k in kernels] == ["aten_sequence"]


def test_cublaslt_option_reaches_the_core() -> None:
    from mybackend import Options

    assert Options().core_options()["cublaslt"] is True
    assert Options.from_user(None, {"cublaslt": False}).core_options()["cublaslt"] is False
    assert set(_C.cublaslt_cache_stats()) == {"hits", "misses", "entries", "timed", "reused"}


def test_explain_dump_shows_the_matmul_spec() -> None:
    from mybackend.reports import format_kernels

    cuda_gm = _on_fake_cuda(lambda x, w: F.linear(x, w), X2, torch.randn(16, 8, dtype=BF16))
    lowered = lower(cuda_gm, [])
    text = format_kernels(_C.compile(lowered.graph, {}, None).report())
    assert "-> matmul" in text and "epilogue=none" in text


def test_matmul_norm_and_pointwise_planners_share_partitions() -> None:
    """Note [Claimed groups]: products claim first, norms next, pointwise last."""
    # f32: a CPU trace of bf16 layer norm saves bf16 statistics, which the
    # norm planner refuses.
    f32 = torch.float32
    module = nn.Sequential(nn.Linear(8, 16, dtype=f32), nn.ReLU(), nn.LayerNorm(16, dtype=f32))
    graphs = _aot_graphs(module, X2.to(f32).requires_grad_())
    for kind in ("forward", "backward"):
        kernels, ops = _kernels(graphs[kind], generated_kernels=True)
        placed = [n for k in kernels for n in k["nodes"]]
        assert len(placed) == len(set(placed)), kernels
        by_kind: dict[str, list[list[str]]] = {}
        for k in kernels:
            by_kind.setdefault(k["kind"], []).append([ops[n] for n in k["nodes"]])
        assert by_kind.get("matmul"), (kind, by_kind)
        assert by_kind.get("norm"), (kind, by_kind)
        norm_ops = {op for group in by_kind["norm"] for op in group}
        if kind == "forward":
            assert any(g[-1] == "aten::relu.default" for g in by_kind["matmul"]), by_kind
            assert "aten::native_layer_norm.default" in norm_ops
        else:
            assert "aten::native_layer_norm_backward.default" in norm_ops
            # The bias gradient is the weight gradient's BGRADB, not a reduction.
            sums = [
                g for groups in by_kind.values() for g in groups if "aten::sum.dim_IntList" in g
            ]
            assert sums and all(g in by_kind["matmul"] for g in sums), by_kind
