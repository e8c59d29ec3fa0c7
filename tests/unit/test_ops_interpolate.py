"""Resampling kept whole (Note [Resampling kept whole]): which F.interpolate
calls become mybackend::interpolate, and the whole path through
torch.compile on the CPU (the rewrite widened to it), against eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import mybackend
from mybackend.ops import interpolate
from tests.testing import compiled_records

WHOLE = torch.ops.mybackend.interpolate.default
BACKWARD = torch.ops.mybackend.interpolate_backward.default
GATHERS = {torch.ops.aten._unsafe_index.Tensor, torch.ops.aten.index.Tensor}


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpolate, "REWRITTEN_DEVICES", ("cpu",))


def _targets(records: list[Any]) -> set[Any]:
    return {n.target for r in records if r.gm is not None for n in r.gm.graph.nodes}


def _compiled_inference(
    fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, dynamic: bool = False
) -> tuple[torch.Tensor, set[Any]]:
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="mybackend", dynamic=dynamic)
    with torch.no_grad():
        out, records = compiled_records(lambda: compiled(*inputs))
    return out, _targets(records)


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "bilinear x2": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (2, 3, 5, 7)),
    "bilinear size, corners": (
        lambda x: F.interpolate(x, size=(9, 4), mode="bilinear", align_corners=True),
        (1, 3, 5, 7),
    ),
    "nearest int size": (lambda x: F.interpolate(x, size=11), (1, 2, 5, 7)),
    "nearest-exact x1.5": (
        lambda x: F.interpolate(x, scale_factor=(1.5, 2.5), mode="nearest-exact"),
        (1, 2, 6, 4),
    ),
    "bicubic recomputed": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic", recompute_scale_factor=True),
        (1, 2, 5, 5),
    ),
    "bilinear antialias down": (
        lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
        (1, 2, 9, 11),
    ),
    "linear 1-d": (lambda x: F.interpolate(x, scale_factor=3, mode="linear"), (2, 3, 5)),
    "trilinear 3-d": (
        lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"),
        (1, 2, 3, 4, 5),
    ),
    "module": (torch.nn.Upsample(scale_factor=2, mode="nearest"), (1, 3, 4, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_mode_runs_whole_with_eagers_values(on_cpu: None, case: str) -> None:
    fn, shape = CASES[case]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(case)))

    def model(x: torch.Tensor) -> torch.Tensor:
        return fn(x * 2).relu()

    out, targets = _compiled_inference(model, x)
    assert WHOLE in targets and not targets & GATHERS, targets
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)  # eager's own kernels


def test_a_channels_last_input_keeps_its_layout(on_cpu: None) -> None:
    x = torch.randn(1, 4, 6, 6).to(memory_format=torch.channels_last)

    def model(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear") + 1

    out, _ = _compiled_inference(model, x)
    want = model(x)
    assert out.stride() == want.stride()
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_sizes_read_from_shapes_follow_dynamic_shapes(on_cpu: None) -> None:
    def model(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] + 3), mode="bilinear")

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend", dynamic=True)
    with torch.no_grad():
        for shape in ((1, 2, 4, 5), (2, 2, 7, 3)):
            x = torch.randn(shape)
            out, records = compiled_records(lambda x=x: compiled(x))
            torch.testing.assert_close(out, model(x), rtol=0, atol=0)
    assert WHOLE in _targets(records) or not records  # the second shape reuses the graph


@pytest.mark.parametrize("case", list(CASES))
def test_each_mode_trains_with_eagers_gradients(on_cpu: None, case: str) -> None:
    fn, shape = CASES[case]
    gen = torch.Generator().manual_seed(len(case))
    x = torch.randn(shape, generator=gen, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()

    def model(x: torch.Tensor) -> torch.Tensor:
        return fn(x * 2).relu()

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend")
    out, records = compiled_records(lambda: compiled(x))
    want = model(x_eager)
    grad = torch.randn(want.shape, generator=gen)
    out.backward(grad)
    want.backward(grad)
    targets = _targets(records)
    assert WHOLE in targets and not targets & GATHERS, targets
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)  # ATen's backward kernel


def test_the_backward_saves_no_activation(on_cpu: None) -> None:
    x = torch.randn(1, 2, 6, 6, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), backend="mybackend"
    )
    _, records = compiled_records(lambda: compiled(x).sum().backward())
    backward = next(r for r in records if r.kind == "backward")
    assert BACKWARD in {n.target for n in backward.gm.graph.nodes}
    # Only the incoming gradient: the input's sizes are constants of the graph.
    assert len(backward.gm.graph.find_nodes(op="placeholder")) == 1


def test_what_stays_decomposed(on_cpu: None) -> None:
    x = torch.randn(1, 2, 6, 6)
    # mode="area" is adaptive pooling, not a gather.
    _, targets = _compiled_inference(lambda x: F.interpolate(x, size=3, mode="area"), x)
    assert WHOLE not in targets
    # Deterministic algorithms: F.interpolate's own gathers and their backward.
    torch._dynamo.reset()
    w = torch.randn(1, 2, 6, 6, requires_grad=True)
    compiled = torch.compile(
        lambda w: F.interpolate(w, scale_factor=2, mode="bilinear").sum(), backend="mybackend"
    )
    torch.use_deterministic_algorithms(True)
    try:
        loss, records = compiled_records(lambda: compiled(w))
        loss.backward()
    finally:
        torch.use_deterministic_algorithms(False)
    assert WHOLE not in _targets(records)
    torch.testing.assert_close(w.grad, torch.full_like(w, 4.0))


def test_cpu_graphs_keep_the_call_by_default() -> None:
    # On the CPU mybackend runs ATen as traced (Note [Eager's kernels on the CPU]).
    assert "cpu" not in interpolate.REWRITTEN_DEVICES
    _, targets = _compiled_inference(
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), torch.randn(1, 2, 3, 3)
    )
    assert WHOLE not in targets


def test_the_pass_can_be_switched_off(on_cpu: None) -> None:
    torch._dynamo.reset()
    fn = torch.compile(
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
        backend="mybackend",
        options={"disabled_passes": ["resampling"]},
    )
    with torch.no_grad():
        _, records = compiled_records(lambda: fn(torch.randn(1, 2, 3, 3)))
    assert WHOLE not in _targets(records)


def test_the_op_is_registered_with_its_schema() -> None:
    assert mybackend is not None
    schema = str(WHOLE._schema)
    assert schema.startswith("mybackend::interpolate(Tensor x, SymInt[]? size, float[]? scale")
