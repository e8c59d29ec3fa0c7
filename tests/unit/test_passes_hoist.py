"""Stage 3: hoisted parameter work (Note [Hoisted parameter work])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import mybackend
import mybackend.aot
from mybackend.aot import static_input_indices
from mybackend.decompositions import decomposition_table
from mybackend.passes.hoist import (
    HoistedValues,
    hoist_parameter_work,
)
from tests.testing import compiled_records, use_cuda_decompositions
from tests.unit.test_passes_layout import ConvBlock

aten = torch.ops.aten


def _inference_graph(module: torch.nn.Module, x: torch.Tensor) -> tuple[Any, list[Any], list[int]]:
    graphs: list[tuple[Any, list[Any], list[int]]] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append((gm, list(example_inputs), static_input_indices("inference")))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=compiler, decompositions=decomposition_table()
        )

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(module, backend=backend)(x)
    return graphs[0]


def _targets(gm: torch.fx.GraphModule) -> set[Any]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _bn_module() -> ConvBlock:
    module = ConvBlock().eval()
    with torch.no_grad():  # statistics that matter
        module.bn.running_mean.uniform_(-1, 1)
        module.bn.running_var.uniform_(0.5, 2)
        module.bn.weight.uniform_(0.5, 1.5)
        module.bn.bias.uniform_(-1, 1)
    return module


def test_batch_norm_statistics_move_to_prepare() -> None:
    module = _bn_module()
    gm, example_inputs, static = _inference_graph(module, torch.randn(2, 3, 8, 8))
    assert static, "aot marks the parameters and buffers static"
    plan = hoist_parameter_work(gm, example_inputs, static)
    assert plan is not None
    assert aten.rsqrt.default in _targets(plan.prepare)
    assert aten.rsqrt.default not in _targets(plan.main)
    assert aten.convolution.default in _targets(plan.main)
    n_inputs = len(example_inputs)
    assert plan.hoisted_inputs == list(range(n_inputs, len(plan.example_inputs)))
    assert set(plan.prepare_inputs) <= set(static)


# Hoisting is opt-in (Note [Hoisted parameter work]): the tests that compile
# through the backend to test it turn it on.
HOIST = {"strict": True, "hoist_parameter_work": True}


@pytest.fixture
def cuda_decompositions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inference batch norm's per-channel scale and shift as nodes, as a
    CUDA graph has them, to hoist them."""
    use_cuda_decompositions(monkeypatch)


def test_hoisted_values_follow_parameter_updates(cuda_decompositions: None) -> None:
    module = _bn_module()
    real = torch.compile(module, backend="mybackend", options=HOIST)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        _, records = compiled_records(lambda: real(x))
        assert any(s == "hoisting" for r in records for s, _ in r.stage_times)
        for _ in range(2):
            for got, want in zip(real(x), module(x), strict=True):
                torch.testing.assert_close(got, want)
        module.bn.running_var.mul_(3.0)  # an in-place update: a new version
        for got, want in zip(real(x), module(x), strict=True):
            torch.testing.assert_close(got, want)
        module.bn.weight.data = module.bn.weight.data * 2  # a new tensor behind the parameter
        for got, want in zip(real(x), module(x), strict=True):
            torch.testing.assert_close(got, want)


def _hoisted_bn_block() -> tuple[Any, HoistedValues, list[torch.Tensor]]:
    """The BN block's hoist plan, its HoistedValues, and real inputs like its examples."""
    module = _bn_module()
    gm, example_inputs, static = _inference_graph(module, torch.randn(2, 3, 8, 8))
    plan = hoist_parameter_work(gm, example_inputs, static)
    assert plan is not None
    return (
        plan,
        HoistedValues.from_plan(plan),
        [torch.randn(t.shape, dtype=t.dtype) for t in example_inputs],
    )


def test_prepare_runs_once_per_parameter_version() -> None:
    plan, hoisted, real_inputs = _hoisted_bn_block()
    first = hoisted.values(real_inputs)
    assert hoisted.values(real_inputs) is first and hoisted.computed == 1
    real_inputs[plan.prepare_inputs[0]].add_(1.0)
    assert hoisted.values(real_inputs) is not first and hoisted.computed == 2


def test_input_versions_see_every_kind_of_parameter_change() -> None:
    """Note [Watching hoisted inputs]: the C++ watcher behind HoistedValues."""
    from mybackend import _C

    weight, other = torch.randn(4), torch.randn(3)
    args: list[Any] = [torch.randn(2), weight, other]
    versions = _C.InputVersions([1, 2])
    assert versions.changed(args)  # the first call
    assert not versions.changed(args)
    assert not versions.changed([torch.randn(2), weight, other])  # unwatched input: no change
    weight.add_(1.0)  # in place: a new version
    assert versions.changed(args) and not versions.changed(args)
    weight.data = torch.randn(4)  # a new tensor behind the same object
    assert versions.changed(args) and not versions.changed(args)
    args[2] = other.clone()  # another tensor at a watched position
    assert versions.changed(args) and not versions.changed(args)
    args[2] = args[2][1:]  # a view: another address
    assert versions.changed(args) and not versions.changed(args)
    versions.forget()
    assert versions.changed(args)
    assert versions.changed([args[0], weight, None])  # not a tensor: always a change
    assert versions.changed([args[0], weight, None])
    assert versions.changed([args[0]])  # the list is too short: a change
    with torch.inference_mode():
        frozen = torch.randn(3)
    assert versions.changed([args[0], weight, frozen])  # no version counter: always a change
    assert versions.changed([args[0], weight, frozen])


def test_hoisted_constants_that_read_no_input_are_computed_on_the_first_call() -> None:
    """A hoisted node with no input to watch (a constant the graph makes) is
    still prepared on the first call: the watcher of no inputs starts changed."""
    from mybackend import _C

    versions = _C.InputVersions([])
    assert versions.changed([torch.randn(2)]) and not versions.changed([torch.randn(2)])
    versions.forget()
    assert versions.changed([])

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + torch.arange(4.0).exp()

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="mybackend", options=HOIST)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x), fn(x))


def test_a_failing_prepare_runs_again_on_the_next_call() -> None:
    _, hoisted, real_inputs = _hoisted_bn_block()
    prepare = hoisted._prepare
    calls = []

    def failing(*args: Any) -> Any:
        calls.append(1)
        raise RuntimeError("prepare failed")

    hoisted._prepare = failing  # type: ignore[assignment]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="prepare failed"):
            hoisted.values(real_inputs)
    assert len(calls) == 2 and hoisted.computed == 0
    hoisted._prepare = prepare
    assert hoisted.values(real_inputs) and hoisted.computed == 1


def test_views_of_weights_stay_in_the_main_graph() -> None:
    # A Linear's weight is only permuted (a view): nothing is computed from it.
    module = torch.nn.Linear(4, 4).eval()
    gm, example_inputs, static = _inference_graph(module, torch.randn(2, 4))
    assert hoist_parameter_work(gm, example_inputs, static) is None


class RandomOfParameter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(self.w) * self.w.exp()


def test_random_ops_are_never_hoisted() -> None:
    gm, example_inputs, static = _inference_graph(RandomOfParameter().eval(), torch.randn(4))
    plan = hoist_parameter_work(gm, example_inputs, static)
    assert plan is not None  # exp(w) is hoisted ...
    assert aten.exp.default in _targets(plan.prepare)
    random_ops = [t for t in _targets(plan.prepare) if torch.Tag.nondeterministic_seeded in t.tags]
    assert random_ops == []  # ... the random op is not


def test_backend_hoists_only_when_asked_and_only_inference(cuda_decompositions: None) -> None:
    """Off by default: edits through ``p.data`` bump no version counter, and
    hoisted values would miss them (Note [Hoisted parameter work])."""
    module = _bn_module()
    x = torch.randn(2, 3, 8, 8)

    def stage_names(options: dict[str, Any], grad: bool) -> list[str]:
        with torch.set_grad_enabled(grad):
            report = mybackend.explain(module, x.clone().requires_grad_(grad), options=options)
        return [s[0] for g in report.to_dict()["graphs"] for s in g["stage_times"]]

    assert "hoisting" not in stage_names({}, grad=False)
    assert "hoisting" not in stage_names({"hoist_parameter_work": False}, grad=False)
    assert "hoisting" in stage_names({"hoist_parameter_work": True}, grad=False)
    assert "hoisting" not in stage_names({"hoist_parameter_work": True}, grad=True)


def test_no_hoisting_while_fsdp2_shards_modules(
    cuda_decompositions: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FSDP2 refills its parameters in place with their version counters kept
    (Note [Graphs under FSDP2]): hoisted values could not follow them."""
    import mybackend.passes.pipeline as pipeline

    monkeypatch.setattr(pipeline, "fsdp2_in_use", lambda: True)
    module = _bn_module()
    with torch.no_grad(), pytest.warns(UserWarning, match="FSDP2"):
        report = mybackend.explain(
            module, torch.randn(2, 3, 8, 8), options={"hoist_parameter_work": True}
        )
    stages = [s[0] for g in report.to_dict()["graphs"] for s in g["stage_times"]]
    assert "hoisting" not in stages


# Note [Constants are always hoisted]


class RolledWindows(torch.nn.Module):
    """A roll written as a gather over index tensors made from aranges that
    read no input (core ATen's decomposition of torch.roll, which mybackend
    replaces: Note [Rolls as concatenations])."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.fmod(torch.arange(5, device=x.device) + 4, 5)
        cols = torch.fmod(torch.arange(6, device=x.device) + 5, 6)
        return x.index_select(1, rows).index_select(2, cols) * 2.0


def _main_and_prepare(module: torch.nn.Module, x: torch.Tensor) -> tuple[Any, Any]:
    gm, example_inputs, _ = _inference_graph(module, x)
    plan = hoist_parameter_work(gm, example_inputs, [])
    assert plan is not None
    return plan, gm


def test_a_gathers_index_tensors_move_to_prepare_without_the_option() -> None:
    plan, gm = _main_and_prepare(RolledWindows(), torch.randn(2, 5, 6, 3))
    assert plan.prepare_inputs == []  # reads no input: nothing to watch
    index_makers = {aten.arange.default, aten.arange.start, aten.arange.start_step}
    assert _targets(gm) & index_makers, "the indices are aranges"
    assert not _targets(plan.main) & index_makers
    x = torch.randn(2, 5, 6, 3)
    hoisted = HoistedValues.from_plan(plan).values([x])
    want = RolledWindows()(x)
    torch.testing.assert_close(plan.main(x, *hoisted)[0], want)


class ReturnsItsConstant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + torch.arange(4.0).exp(), torch.arange(1.0, 5.0).view(2, 2)


def test_a_returned_constant_is_made_on_every_call() -> None:
    """The caller owns an output: a hoisted value returned would be shared
    by every call, and a write to it would change the next call's result."""
    plan, _ = _main_and_prepare(ReturnsItsConstant(), torch.randn(3, 4))
    assert aten.exp.default in _targets(plan.prepare)
    assert {aten.arange.start, aten.arange.start_step} & _targets(plan.main)
    torch._dynamo.reset()
    compiled = torch.compile(ReturnsItsConstant(), backend="mybackend", options={"strict": True})
    with torch.no_grad():
        x = torch.randn(3, 4)
        _, first = compiled(x)
        first.add_(100.0)
        out, second = compiled(x)
    torch.testing.assert_close(second, torch.arange(1.0, 5.0).view(2, 2))
    torch.testing.assert_close(out, x + torch.arange(4.0).exp())


def test_a_large_constant_stays_in_the_main_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    import mybackend.passes.hoist as hoist

    monkeypatch.setattr(hoist, "MAX_CONSTANT_BYTES", 8)  # fewer than 4 float32 values
    gm, example_inputs, _ = _inference_graph(ReturnsItsConstant(), torch.randn(3, 4))
    assert hoist_parameter_work(gm, example_inputs, []) is None


def test_constants_are_hoisted_by_default_through_the_backend(cuda_decompositions: None) -> None:
    torch._dynamo.reset()
    module = RolledWindows()
    x = torch.randn(2, 5, 6, 3)
    with torch.no_grad():
        report = mybackend.explain(module, x)
        compiled = torch.compile(module, backend="mybackend", options={"strict": True})
        for _ in range(2):
            x = torch.randn(2, 5, 6, 3)
            torch.testing.assert_close(compiled(x), module(x))
    stages = [s[0] for g in report.to_dict()["graphs"] for s in g["stage_times"]]
    assert "hoisting" in stages


def _scaled(x: torch.Tensor) -> torch.Tensor:
    """DeBERTa's attention scale: a 0-dim host tensor read by GPU elementwise ops."""
    return x / torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float32) * 2)


def test_a_host_scalar_constant_moves_to_its_readers_device() -> None:
    """Note [Host scalars hoisted to the device]: the main graph then holds
    no host tensor, which would keep it out of CUDA graphs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(2, 8, device="cuda")
        gm = make_fx(_scaled, tracing_mode="fake")(x)
    values = [n.meta["val"] for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    assert any(v.device.type == "cpu" for v in values), "the traced graph holds a host tensor"
    plan = hoist_parameter_work(gm, [x], [])
    assert plan is not None and plan.prepare_inputs == []
    main_values = [
        n.meta["val"] for n in plan.main.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
    ]
    assert all(v.device.type == "cuda" for v in main_values), main_values
    assert plan.example_inputs[-1].device.type == "cuda"
    assert aten._to_copy.default in _targets(plan.prepare)


def test_a_host_scalar_read_on_the_host_stays_there() -> None:
    """On the CPU the readers are on the host: nothing moves, and the
    prepared constant computes eager's result."""
    gm, example_inputs, _ = _inference_graph(_Scaled(), torch.randn(2, 8))
    plan = hoist_parameter_work(gm, example_inputs, [])
    assert plan is not None
    assert aten._to_copy.default not in _targets(plan.prepare)
    x = torch.randn(2, 8)
    hoisted = HoistedValues.from_plan(plan).values([x])
    torch.testing.assert_close(plan.main(x, *hoisted)[0], _scaled(x))


class _Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scaled(x)
