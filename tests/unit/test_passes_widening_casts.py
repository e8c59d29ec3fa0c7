"""Stage 3: one widening cast per elementwise reader (Note [One widening cast
per reader]) and casts moved after their views (Note [Widening casts after
views]), on fake CUDA graphs planned and compiled without a GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.passes.widening_casts import cast_after_views, split_widening_casts
from tests.unit.test_matmul_plan import _kernels, _matmuls, _on_fake_cuda

BF16 = torch.bfloat16
aten = torch.ops.aten


def _junction(g: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """A bottleneck junction's shape: one f32 view of a bf16 gradient read by
    two elementwise kernels, the second after a reduction of the first."""
    wide = g.float()
    first = wide - a
    total = first.sum(dim=0, keepdim=True)
    return wide * total


def _graph(fn: Callable[..., Any], *dtypes: torch.dtype) -> torch.fx.GraphModule:
    inputs = [torch.randn(4, 16, 8, 8, dtype=d) for d in dtypes]
    return _on_fake_cuda(fn, *inputs)


def _casts(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is aten._to_copy.default]


def _stored_casts(gm: torch.fx.GraphModule) -> list[list[str]]:
    """The generated kernels holding a cast whose result they store (an
    output that is the cast's own value)."""
    kernels, ops = _kernels(gm, generated_kernels=True)
    stored = []
    for k in kernels:
        if k["kind"] != "pointwise" or "aten::_to_copy.default" not in [ops[n] for n in k["nodes"]]:
            continue
        lines = [line.strip() for line in k["spec"].splitlines()]
        cast_values = {line.split(" = ")[0] for line in lines if " = cast " in line}
        outputs = {line.rsplit(" = ", 1)[1] for line in lines if line.startswith("out")}
        if cast_values & outputs:
            stored.append([ops[n] for n in k["nodes"]])
    return stored


def test_a_cast_read_by_two_kernels_gets_a_copy_per_reader() -> None:
    gm = _graph(_junction, BF16, torch.float32)
    assert len(_casts(gm)) == 1
    assert _stored_casts(gm), "without the split the f32 cast is stored for the second reader"
    assert split_widening_casts(gm) == 1
    casts = _casts(gm)
    assert len(casts) == 2 and all(len(c.users) == 1 for c in casts)
    assert {c.args[0] for c in casts} == {casts[0].args[0]}  # both read the bf16 gradient
    assert _stored_casts(gm) == []
    kernels, ops = _kernels(gm, generated_kernels=True)
    readers = [k for k in kernels if "aten::_to_copy.default" in [ops[n] for n in k["nodes"]]]
    assert len(readers) == 2, kernels
    for k in readers:  # each kernel reads the bf16 gradient and casts it itself
        assert "in0 bf16" in k["spec"], k["spec"]
    assert split_widening_casts(gm) == 0  # nothing left to split


def test_the_split_graph_computes_the_same_values() -> None:
    gm = _graph(_junction, BF16, torch.float32)
    split_widening_casts(gm)
    g = torch.randn(4, 16, 8, 8, dtype=BF16)
    a = torch.randn(4, 16, 8, 8)
    # The rewritten module's code, run on CPU tensors (the devices it names
    # are the inputs' own; only the pass's device check needed CUDA).
    torch.testing.assert_close(gm(g, a), _junction(g, a), rtol=0, atol=0)


def test_casts_it_leaves_alone() -> None:
    def narrowing(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = x.to(BF16)
        return low + 1, low * 2

    def read_by_a_reduction(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = g.float()
        return wide.sum(dim=0), wide * 2

    def one_reader(g: torch.Tensor) -> torch.Tensor:
        return g.float() * 2

    def a_graph_output(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        wide = g.float()
        return wide, wide + 1, wide * 2

    for fn, dtype in [
        (narrowing, torch.float32),
        (read_by_a_reduction, BF16),
        (one_reader, BF16),
        (a_graph_output, BF16),
    ]:
        gm = _graph(fn, dtype)
        before = gm.code
        assert split_widening_casts(gm) == 0, fn.__name__
        assert gm.code == before

    # A reader whose result is larger (a broadcast): the cast could not join it.
    def a_broadcasting_reader(g: torch.Tensor, big: torch.Tensor) -> tuple[Any, Any]:
        wide = g.float()
        return wide + 1, wide + big

    gm = _on_fake_cuda(
        a_broadcasting_reader, torch.randn(4, 16, 8, 8, dtype=BF16), torch.randn(3, 4, 16, 8, 8)
    )
    assert split_widening_casts(gm) == 0

    # A CPU graph: its casts run as ATen calls, where a copy is a second call.
    cpu = make_fx(_junction, tracing_mode="fake")(
        torch.randn(4, 16, 8, 8, dtype=BF16), torch.randn(4, 16, 8, 8)
    )
    assert len(_casts(cpu)) == 1
    assert split_widening_casts(cpu) == 0


def _mlp_gradient(a: torch.Tensor, b: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """GPT-2's MLP gradient under autocast: a bf16 product upcast as autocast's
    backward writes it, viewed to [batch, tokens, features] and read by the
    GELU backward's elementwise ops."""
    wide = aten._to_copy.default(
        torch.mm(a, b), dtype=torch.float32, layout=torch.strided, device=a.device
    )
    g = wide.view(2, 8, 32)
    return (g * h * 0.5 + g).to(BF16)


def _mlp_graph() -> torch.fx.GraphModule:
    return _on_fake_cuda(
        _mlp_gradient,
        torch.randn(16, 24, dtype=BF16),
        torch.randn(24, 32, dtype=BF16),
        torch.randn(2, 8, 32),
    )


def test_a_cast_behind_a_view_moves_after_it_and_joins_its_readers() -> None:
    gm = _mlp_graph()
    [before] = _matmuls(gm, generated_kernels=True)
    assert "written in f32" in before["why"], before  # the product stored wide
    assert cast_after_views(gm) == 1
    [cast] = [c for c in _casts(gm) if c.meta["val"].dtype == torch.float32]
    assert cast.args[0].target is aten.view.default
    assert cast.args[0].args[0].target is aten.mm.default
    assert cast.meta["val"].shape == (2, 8, 32) and cast.meta["val"].dtype == torch.float32
    [after] = _matmuls(gm, generated_kernels=True)
    assert "written in f32" not in after["why"], after
    kernels, ops = _kernels(gm, generated_kernels=True)
    [pointwise] = [k for k in kernels if k["kind"] == "pointwise"]
    assert "aten::_to_copy.default" in [ops[n] for n in pointwise["nodes"]]
    inputs = [line.split() for line in pointwise["spec"].splitlines() if line.startswith("  in")]
    assert sorted(dtype for _, dtype, *_ in inputs) == ["bf16", "f32"], pointwise["spec"]
    assert cast_after_views(gm) == 0


def test_the_moved_cast_computes_the_same_values() -> None:
    gm = _mlp_graph()
    cast_after_views(gm)
    for node in gm.graph.nodes:  # run the rewritten code on CPU tensors
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    a, b = torch.randn(16, 24, dtype=BF16), torch.randn(24, 32, dtype=BF16)
    h = torch.randn(2, 8, 32)
    torch.testing.assert_close(gm(a, b, h), _mlp_gradient(a, b, h), rtol=0, atol=0)


def test_casts_behind_views_it_leaves_alone() -> None:
    def read_by_a_reduction(x: torch.Tensor) -> torch.Tensor:
        return x.float().view(2, 8, 32).sum(dim=1)

    def read_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = x.float()
        return wide.view(2, 8, 32) * 2, wide + 1

    def a_strided_source(x: torch.Tensor) -> torch.Tensor:
        return x.t().float().reshape(2, 16, 16) * 2

    for fn, shape in [
        (read_by_a_reduction, (16, 32)),
        (read_twice, (16, 32)),
        (a_strided_source, (32, 16)),
    ]:
        gm = _on_fake_cuda(fn, torch.randn(*shape, dtype=BF16))
        before = gm.code
        assert cast_after_views(gm) == 0, fn.__name__
        assert gm.code == before
