"""Stage 3: each batch-norm backward sum gets its own copy of the ReLU gradient
it reads (Note [A ReLU gradient recomputed by its batch-norm sums]), on fake
CUDA graphs planned and compiled without a GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from mybackend.ops import batch_norm
from mybackend.ops.batch_norm import batch_norm_backward
from mybackend.passes.batch_norm_gradients import MAX_COPIED_OPS, copy_batch_norm_gradients
from tests.unit.test_matmul_plan import _kernels, _on_fake_cuda

BF16 = torch.bfloat16
aten = torch.ops.aten
SHAPE = (4, 16, 5, 5)
CL = torch.channels_last
SUMS = "mybackend::batch_norm_backward_reduce.default"


def _relu_gradient(relu_out: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """What aot_autograd leaves for a ReLU's backward."""
    zero = aten.scalar_tensor.default(0, dtype=dy.dtype, layout=torch.strided, device=dy.device)
    return aten.where.self(aten.le.Scalar(relu_out, 0), zero, dy)


def _bn_backward(masked: torch.Tensor, x: torch.Tensor, stats: tuple[Any, ...]) -> Any:
    mean, invstd, weight = stats
    return batch_norm_backward(
        masked, x, weight, None, None, mean, invstd, True, 1e-5, [True, True, True]
    )


def _block(dy: Any, relu_out: Any, x: Any, mean: Any, invstd: Any, weight: Any) -> Any:
    """A bottleneck's inner ReLU -> batch norm backward."""
    return _bn_backward(_relu_gradient(relu_out, dy), x, (mean, invstd, weight))


def _inputs(dy_format: torch.memory_format = CL) -> list[torch.Tensor]:
    activation = [torch.randn(SHAPE, dtype=BF16).to(memory_format=CL) for _ in range(2)]
    channel = [torch.randn(16), torch.rand(16) + 0.5, torch.randn(16)]
    return [torch.randn(SHAPE, dtype=BF16).to(memory_format=dy_format), *activation, *channel]


def _graph(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    return _on_fake_cuda(fn, *inputs)


def _groups(gm: torch.fx.GraphModule) -> list[tuple[str, list[str]]]:
    kernels, ops = _kernels(gm, generated_kernels=True)
    return [(k["kind"], [ops[n].split("::")[-1] for n in k["nodes"]]) for k in kernels]


def test_the_sums_recompute_the_relu_gradient_and_nothing_stores_it() -> None:
    gm = _graph(_block, _inputs())
    before = _groups(gm)
    assert ("pointwise", ["le.Scalar", "where.self"]) in before, before
    assert copy_batch_norm_gradients(gm) == 1
    wheres = [n for n in gm.graph.nodes if n.target is aten.where.self]
    assert len(wheres) == 2 and all(len(w.users) == 1 for w in wheres)
    after = _groups(gm)
    norms = [ops for kind, ops in after if kind == "norm"]
    assert norms == [["le.Scalar", "where.self", "batch_norm_backward_reduce.default"]], after
    pointwise = [ops for kind, ops in after if kind == "pointwise"]
    # The input gradient's kernel computes the masked gradient itself.
    assert len(pointwise) == 1 and pointwise[0][:2] == ["le.Scalar", "where.self"], after
    assert copy_batch_norm_gradients(gm) == 0  # each sum has its own copy now


def test_the_copied_graph_computes_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu", "cuda"))  # the eager reference
    inputs = _inputs()
    gm = _graph(_block, inputs)
    copy_batch_norm_gradients(gm)
    # The rewritten module run on CPU tensors: its scalar_tensor names the
    # traced device, moved to the CPU here (only the pass needed CUDA).
    for node in gm.graph.nodes:
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    got, want = gm(*inputs), _block(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_two_sums_reading_one_gradient_get_a_copy_each() -> None:
    """A downsample junction: one masked gradient, two batch norms' backwards."""

    def junction(dy: Any, relu_out: Any, x: Any, mean: Any, invstd: Any, weight: Any) -> Any:
        masked = _relu_gradient(relu_out, dy)
        main = _bn_backward(masked, x, (mean, invstd, weight))
        down = _bn_backward(masked, relu_out, (mean, invstd, weight))
        return main[0] + down[0], main[1], down[1]

    gm = _graph(junction, _inputs())
    assert copy_batch_norm_gradients(gm) == 2
    norms = [ops for kind, ops in _groups(gm) if kind == "norm"]
    assert len(norms) == 2 and all("where.self" in ops for ops in norms), norms


def test_sums_alone_with_their_gradient_take_it_without_a_copy() -> None:
    def sums_only(dy: Any, relu_out: Any, x: Any, mean: Any, invstd: Any, weight: Any) -> Any:
        return torch.ops.mybackend.batch_norm_backward_reduce(
            _relu_gradient(relu_out, dy), x, mean, invstd
        )

    gm = _graph(sums_only, _inputs())
    assert copy_batch_norm_gradients(gm) == 0
    norms = [ops for kind, ops in _groups(gm) if kind == "norm"]
    assert norms == [["le.Scalar", "where.self", "batch_norm_backward_reduce.default"]]


def _residual(dy: Any, relu_out: Any, x: Any, mean: Any, invstd: Any, weight: Any) -> Any:
    """The masked gradient also flows down a skip connection into an addition
    after a reduction of the branch's input gradient (a convolution backward
    in ResNet): it is stored for that reader anyway."""
    masked = _relu_gradient(relu_out, dy)
    grad_input, grad_weight, grad_bias = _bn_backward(masked, x, (mean, invstd, weight))
    branch = grad_input.float().sum(dim=(0, 2, 3), keepdim=True)
    return masked * branch, grad_weight, grad_bias


def _long_chain(dy: Any, relu_out: Any, x: Any, mean: Any, invstd: Any, weight: Any) -> Any:
    grad = dy
    for _ in range(MAX_COPIED_OPS):
        grad = grad * 1.5
    return _bn_backward(_relu_gradient(relu_out, grad), x, (mean, invstd, weight))


@pytest.mark.parametrize(
    ("fn", "dy_format"),
    [(_residual, CL), (_long_chain, CL), (_block, torch.contiguous_format)],
    ids=["a skip-connection reader", "a chain too long", "dy in another layout than x"],
)
def test_gradients_it_leaves_alone(fn: Callable[..., Any], dy_format: torch.memory_format) -> None:
    gm = _graph(fn, _inputs(dy_format))
    before = gm.code
    assert copy_batch_norm_gradients(gm) == 0
    assert gm.code == before


def test_a_cpu_graph_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU the sums run as ATen calls: a copy would only compute twice."""
    from torch.fx.experimental.proxy_tensor import make_fx

    monkeypatch.setattr(batch_norm, "REWRITTEN_DEVICES", ("cpu", "cuda"))
    gm = make_fx(_block, tracing_mode="fake")(*_inputs())
    assert any(
        n.target is torch.ops.mybackend.batch_norm_backward_reduce.default for n in gm.graph.nodes
    )
    assert copy_batch_norm_gradients(gm) == 0
