"""Fused cross-entropy (Note [Fused cross-entropy]): the ops' ATen
implementations against F.cross_entropy, the dynamo-graph rewrite, the whole
path through torch.compile on the CPU, and the planner's generated kernels
(fake CUDA tensors; NVRTC needs no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend
from mybackend import _C
from mybackend.lowering import lower
from mybackend.ops import cross_entropy
from mybackend.ops.cross_entropy import fused_cross_entropy, rewrite_cross_entropy

IGNORE = -100


def _case(
    dtype: torch.dtype, rows: int = 9, classes: int = 13
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(rows * classes)
    x = (torch.randn(rows, classes, generator=gen) * 3).to(dtype).requires_grad_()
    target = torch.randint(0, classes, (rows,), generator=gen)
    target[1] = IGNORE
    return x, target


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_ops_match_cross_entropy_of_the_upcast_logits(
    dtype: torch.dtype, reduction: str
) -> None:
    x, target = _case(dtype)
    expected = F.cross_entropy(x.float(), target, ignore_index=IGNORE, reduction=reduction)
    got = fused_cross_entropy(x, target, IGNORE, reduction)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected)
    grad = torch.randn_like(expected)
    (want,) = torch.autograd.grad(expected, x, grad)
    (have,) = torch.autograd.grad(got, x, grad)
    assert have.dtype == dtype and have.is_contiguous()
    torch.testing.assert_close(have, want)
    assert have[1].abs().max() == 0  # the ignored row


def test_mean_over_only_ignored_rows_is_nan_like_eager() -> None:
    x, _ = _case(torch.float32, rows=3)
    target = torch.full((3,), IGNORE)
    assert F.cross_entropy(x, target).isnan()
    assert fused_cross_entropy(x, target, IGNORE, "mean").isnan()


def test_logits_with_a_row_stride() -> None:
    # A padded output layer hands over a [rows, classes] view of wider rows.
    wide, target = _case(torch.bfloat16, classes=16)
    x = wide[:, :13]
    expected = F.cross_entropy(x.float(), target.clamp(max=12), reduction="sum")
    torch.testing.assert_close(
        fused_cross_entropy(x, target.clamp(max=12), IGNORE, "sum"), expected
    )


def _dynamo_graph(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, _: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture)(*inputs)
    assert len(graphs) == 1
    return graphs[0]


def _targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


def test_rewrite_drops_the_upcast_and_keeps_the_result() -> None:
    x, target = _case(torch.bfloat16)

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x.float(), t, reduction="sum")

    gm = _dynamo_graph(loss, x, target)
    assert rewrite_cross_entropy(gm, devices=("cpu",)) == 1
    assert _targets(gm) == [fused_cross_entropy]  # .float() is gone
    torch.testing.assert_close(gm(x, target)[0], loss(x, target))


@pytest.mark.parametrize(
    "upcast_then_view",
    [
        lambda x: x.float().view(-1, 13),  # transformers' ForCausalLMLoss
        lambda x: x.to(torch.float32).flatten(0, -2),  # the benchmarks' loss
        lambda x: torch.reshape(x.float(), (-1, 13)),
    ],
    ids=["view", "flatten", "reshape"],
)
def test_rewrite_drops_an_upcast_behind_views(
    upcast_then_view: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    x, target = _case(torch.bfloat16, rows=12)
    x3 = x.detach().view(3, 4, 13)

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(upcast_then_view(x), t)

    gm = _dynamo_graph(loss, x3, target)
    assert rewrite_cross_entropy(gm, devices=("cpu",)) == 1
    targets = _targets(gm)
    assert "float" not in targets and "to" not in targets, targets
    fused = next(n for n in gm.graph.nodes if n.target is fused_cross_entropy)
    assert fused.args[0].args[0].op == "placeholder"  # the view reads the bf16 logits
    torch.testing.assert_close(gm(x3, target)[0], loss(x3, target))


def test_rewrite_keeps_an_upcast_read_elsewhere() -> None:
    x, target = _case(torch.bfloat16, rows=12)

    def loss(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        upcast = x.float()
        return F.cross_entropy(upcast.view(-1, 13), t), upcast.sum()

    gm = _dynamo_graph(loss, x.detach(), target)
    assert rewrite_cross_entropy(gm, devices=("cpu",)) == 1
    fused = next(n for n in gm.graph.nodes if n.target is fused_cross_entropy)
    assert fused.args[0].meta["example_value"].dtype == torch.float32
    for got, want in zip(gm(x.detach(), target), loss(x.detach(), target), strict=True):
        torch.testing.assert_close(got, want)


def test_rewrite_under_autocast_reads_the_bf16_logits() -> None:
    x, target = _case(torch.float32)
    w = torch.randn(13, 13)

    def loss(x: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x @ w, t)  # bf16 logits, fp32 math under autocast

    with torch.autocast("cpu", dtype=torch.bfloat16):
        gm = _dynamo_graph(loss, x, w, target)
        assert rewrite_cross_entropy(gm, devices=("cpu",)) == 1
        fused = next(n for n in gm.graph.nodes if n.target is fused_cross_entropy)
        assert fused.args[0].meta["example_value"].dtype == torch.bfloat16
        torch.testing.assert_close(gm(x, w, target)[0], loss(x, w, target))


@pytest.mark.parametrize(
    "call",
    [
        lambda x, t: F.cross_entropy(x, t, weight=torch.ones(13)),
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
        lambda x, t: F.cross_entropy(x.unsqueeze(-1), t.unsqueeze(-1)),  # [N, C, 1]
        lambda x, t: F.cross_entropy(x, F.one_hot(t.clamp(min=0), 13).float()),  # probabilities
        lambda x, t: F.cross_entropy(x.bfloat16(), t),  # bf16 math without autocast
    ],
    ids=["weight", "label_smoothing", "3d", "probabilities", "bf16-math"],
)
def test_rewrite_leaves_other_calls(call: Callable[..., torch.Tensor]) -> None:
    x, target = _case(torch.float32)
    gm = _dynamo_graph(call, x.detach(), target)
    assert rewrite_cross_entropy(gm, devices=("cpu",)) == 0
    assert F.cross_entropy in _targets(gm)


def test_rewrite_is_for_cuda_logits_by_default() -> None:
    x, target = _case(torch.float32)
    gm = _dynamo_graph(lambda x, t: F.cross_entropy(x, t), x.detach(), target)
    assert rewrite_cross_entropy(gm) == 0


def test_training_through_the_backend_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cross_entropy, "REWRITTEN_DEVICES", ("cpu",))
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 37)
    x, target = torch.randn(10, 16), torch.randint(0, 37, (10,))
    target[3] = IGNORE

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(layer(x).float(), t)

    expected = step(x, target)
    expected.backward()
    want = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    torch._dynamo.reset()
    got = torch.compile(step, backend="mybackend", options={"strict": True})(x, target)
    got.backward()
    torch.testing.assert_close(got, expected)
    for p, w in zip(layer.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w)
    report = mybackend.explain(step, x, target)
    assert any("mybackend::cross_entropy_forward.default" in g.ir_text for g in report.graphs)


def test_option_turns_the_rewrite_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cross_entropy, "REWRITTEN_DEVICES", ("cpu",))
    x, target = _case(torch.float32)

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t)

    torch._dynamo.reset()
    on = mybackend.explain(step, x, target)
    assert any("cross_entropy_forward" in g.ir_text for g in on.graphs)
    torch._dynamo.reset()
    off = mybackend.explain(step, x, target, options={"fused_cross_entropy": False})
    assert not any("cross_entropy_forward" in g.ir_text for g in off.graphs)


def test_capability_registry_claims_the_ops() -> None:
    ops = dict(mybackend.supported_ops())
    assert ops["mybackend::cross_entropy_forward.default"] == "normalization"
    assert ops["mybackend::cross_entropy_backward.default"] == "normalization"


def _cuda_kernels(
    fn: Callable[..., Any], *specs: tuple[tuple[int, ...], torch.dtype]
) -> list[dict[str, Any]]:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        inputs = [torch.empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    lowered = lower(gm, [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    return list(compiled.report()["kernels"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_planner_generates_both_kernels(dtype: torch.dtype) -> None:
    ops = torch.ops.mybackend

    def forward(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.cross_entropy_forward(x[:, :50257], t, IGNORE)

    def backward(
        g: torch.Tensor, x: torch.Tensor, t: torch.Tensor, lse: torch.Tensor
    ) -> torch.Tensor:
        return ops.cross_entropy_backward(g, x[:, :50257], t, lse, IGNORE)

    rows = ((64,), torch.float32)
    for fn, specs, kind, entry in [
        (forward, [((64, 50264), dtype), ((64,), torch.int64)], "cross_entropy ", "forward"),
        (
            backward,
            [rows, ((64, 50264), dtype), ((64,), torch.int64), rows],
            "cross_entropy_backward",
            "backward",
        ),
    ]:
        kernels = [k for k in _cuda_kernels(fn, *specs) if k["kind"] == "norm"]
        assert len(kernels) == 1, kernels
        assert f"norm {kind}" in kernels[0]["spec"]
        assert f"mb::cross_entropy_{entry}<" in kernels[0]["source"]


def test_planner_leaves_fp64_logits_to_aten() -> None:
    kernels = _cuda_kernels(
        lambda x, t: torch.ops.mybackend.cross_entropy_forward(x, t, IGNORE),
        ((8, 16), torch.float64),
        ((8,), torch.int64),
    )
    assert all(k["kind"] != "norm" for k in kernels)


def test_padded_gradient_matches_the_padded_copy() -> None:
    """Note [Padded cross-entropy gradient]: the op's ATen implementation."""
    x, target = _case(torch.bfloat16)
    x = x.detach()
    lse = torch.logsumexp(x.float(), dim=1)
    grad_loss = torch.rand(x.shape[0])
    ops = torch.ops.mybackend
    plain = ops.cross_entropy_backward(grad_loss, x, target, lse, IGNORE)
    padded = ops.cross_entropy_backward(grad_loss, x, target, lse, IGNORE, 3)
    assert padded.shape == (x.shape[0], x.shape[1] + 3) and padded.is_contiguous()
    torch.testing.assert_close(padded, F.pad(plain, (0, 3)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="pad must be >= 0"):
        ops.cross_entropy_backward(grad_loss, x, target, lse, IGNORE, -1)


def _output_layer_backward(
    g: torch.Tensor,
    x: torch.Tensor,
    t: torch.Tensor,
    lse: torch.Tensor,
    w: torch.Tensor,
    h: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-2's backward around its loss: the logits' gradient, reshaped to
    [batch, seq, vocab] and back, feeds both products of the output layer."""
    grad = torch.ops.mybackend.cross_entropy_backward(g, x, t, lse, IGNORE)
    grad = grad.view(2, grad.shape[0] // 2, grad.shape[1]).view(grad.shape[0], grad.shape[1])
    return torch.mm(grad, w), torch.mm(grad.t(), h)


def _pad_output_layer(device: str) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, int]:
    from mybackend.passes import matmul_padding

    shapes = [((64,), torch.float32), ((64, 101), torch.bfloat16), ((64,), torch.int64)]
    shapes += [((64,), torch.float32), ((101, 40), torch.bfloat16), ((64, 40), torch.bfloat16)]
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [torch.empty(s, dtype=d, device=device) for s, d in shapes]
    gm = make_fx(_output_layer_backward, tracing_mode="fake")(*fakes)
    limit = matmul_padding._MAX_COPY_TO_PRODUCT
    matmul_padding._MAX_COPY_TO_PRODUCT = float("inf")
    try:
        padded, count = matmul_padding.pad_matmuls(gm, fakes, "backward", device_types=(device,))
    finally:
        matmul_padding._MAX_COPY_TO_PRODUCT = limit
    return gm, padded, count


def test_the_output_layer_pad_becomes_the_gradient_kernels_padding() -> None:
    """Both products read the gradient padded to 104 columns; the cross-entropy
    backward writes those rows itself, with no constant_pad_nd left."""
    gm, padded, count = _pad_output_layer("cpu")
    assert count == 2
    nodes = list(padded.graph.nodes)
    assert not [
        n
        for n in nodes
        if n.target is torch.ops.aten.constant_pad_nd.default
        and "cross_entropy" in str(n.args[0].target)
    ]
    [grad] = [n for n in nodes if n.target is torch.ops.mybackend.cross_entropy_backward.default]
    assert grad.args[5] == 3 and tuple(grad.meta["val"].shape) == (64, 104)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 101, generator=gen).to(torch.bfloat16)
    target = torch.randint(0, 101, (64,), generator=gen)
    target[3] = IGNORE
    real = [torch.rand(64, generator=gen), x, target, torch.logsumexp(x.float(), dim=1)]
    real += [torch.randn(101, 40, generator=gen).to(torch.bfloat16)]
    real += [torch.randn(64, 40, generator=gen).to(torch.bfloat16)]
    for got, want in zip(padded(*real), gm(*real), strict=True):
        torch.testing.assert_close(got, want)


def test_a_gradient_read_elsewhere_keeps_the_pad() -> None:
    def fn(g, x, t, lse, w):  # type: ignore[no-untyped-def]
        grad = torch.ops.mybackend.cross_entropy_backward(g, x, t, lse, IGNORE)
        return torch.mm(grad, w), grad.sum()

    from mybackend.passes import matmul_padding

    shapes = [((64,), torch.float32), ((64, 101), torch.bfloat16), ((64,), torch.int64)]
    shapes += [((64,), torch.float32), ((101, 40), torch.bfloat16)]
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [torch.empty(s, dtype=d, device="cpu") for s, d in shapes]
    gm = make_fx(fn, tracing_mode="fake")(*fakes)
    limit = matmul_padding._MAX_COPY_TO_PRODUCT
    matmul_padding._MAX_COPY_TO_PRODUCT = float("inf")
    try:
        padded, count = matmul_padding.pad_matmuls(gm, fakes, "backward", device_types=("cpu",))
    finally:
        matmul_padding._MAX_COPY_TO_PRODUCT = limit
    assert count == 1
    [grad] = [
        n
        for n in padded.graph.nodes
        if n.target is torch.ops.mybackend.cross_entropy_backward.default
    ]
    assert len(grad.args) == 5
    assert [n for n in padded.graph.nodes if n.target is torch.ops.aten.constant_pad_nd.default]


def test_planner_generates_the_padded_gradient_kernel() -> None:
    ops = torch.ops.mybackend

    def backward(
        g: torch.Tensor, x: torch.Tensor, t: torch.Tensor, lse: torch.Tensor
    ) -> torch.Tensor:
        return ops.cross_entropy_backward(g, x[:, :50257], t, lse, IGNORE, 7)

    rows = ((64,), torch.float32)
    specs = [rows, ((64, 50264), torch.bfloat16), ((64,), torch.int64), rows]
    kernels = [k for k in _cuda_kernels(backward, *specs) if k["kind"] == "norm"]
    assert len(kernels) == 1, kernels
    assert "out_row_stride" in kernels[0]["source"]
