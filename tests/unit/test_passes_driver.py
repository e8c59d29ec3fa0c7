"""The graph-pass driver (Note [Passes as data] in mybackend/passes/driver.py)
and the three pass lists it runs (mybackend/passes/pipeline.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.fx

from mybackend.options import Options
from mybackend.passes import pipeline
from mybackend.passes.driver import GraphPass, PassContext, PassError, always, run_passes
from tests.testing import compiled_records


def _graph() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)


def _context(kind: str = "inference", **options: object) -> PassContext:
    return PassContext(_graph(), [], kind, "graph9.inference", Options.from_user(None, options))


def _counting_recompiles(ctx: PassContext) -> list[int]:
    calls: list[int] = []
    original = ctx.gm.recompile

    def recompile() -> object:
        calls.append(1)
        return original()

    ctx.gm.recompile = recompile  # type: ignore[method-assign]
    return calls


def _recording(name: str, ran: list[str], changes: int = 1) -> GraphPass:
    def run(ctx: PassContext) -> int:
        ran.append(name)
        return changes

    return GraphPass(name, always, run)


def _add_one(ctx: PassContext) -> int:
    """Adds 1 to the graph's output (a real rewrite of its nodes)."""
    graph = ctx.gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        plus = graph.call_function(torch.add, (output.args[0], 1))
    output.args = (plus,)
    return 1


def test_passes_run_in_list_order() -> None:
    ran: list[str] = []
    ctx = run_passes([_recording(n, ran) for n in ("c", "a", "b")], _context())
    assert ran == ["c", "a", "b"]
    assert [name for name, _, _ in ctx.times] == ["c", "a", "b"]


def test_disabled_passes_and_other_kinds_do_not_run() -> None:
    ran: list[str] = []
    passes = [
        GraphPass("off", lambda options: not options.channels_last,
                  lambda ctx: ran.append("off") or 1),
        GraphPass("on", lambda options: options.channels_last,
                  lambda ctx: ran.append("on") or 1),
        GraphPass("forward only", always, lambda ctx: ran.append("fwd") or 1,
                  kinds=frozenset({"forward"})),
        GraphPass("relu only", always, lambda ctx: ran.append("relu") or 1,
                  targets=(torch.relu,)),
        GraphPass("sigmoid only", always, lambda ctx: ran.append("sigmoid") or 1,
                  targets=(torch.sigmoid,)),
    ]  # fmt: skip
    run_passes(passes, _context())
    assert ran == ["on", "relu"]
    ran.clear()
    run_passes(passes, _context("forward", channels_last=False))
    assert ran == ["off", "fwd", "relu"]


def test_the_option_disabled_passes_skips_passes_by_name() -> None:
    ran: list[str] = []
    passes = [_recording("softmax_views", ran), _recording("layout", ran)]
    run_passes(passes, _context(disabled_passes=["softmax_views"]))
    assert ran == ["layout"]


def test_the_environment_disables_passes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # For same-process A/B runs (benchmarks.ab_env), read at each compile.
    ran: list[str] = []
    passes = [_recording("softmax_views", ran), _recording("layout", ran)]
    monkeypatch.setenv("MYBACKEND_DISABLED_PASSES", "layout, softmax_views")
    run_passes(passes, _context())
    assert ran == []
    monkeypatch.setenv("MYBACKEND_DISABLED_PASSES", "softmax_view")
    with pytest.raises(ValueError, match=r"MYBACKEND_DISABLED_PASSES: .*'softmax_view'"):
        run_passes(passes, _context())


def test_disabled_passes_names_an_unknown_pass() -> None:
    with pytest.raises(ValueError, match=r"unknown pass 'softmax_view'.*'softmax_views'"):
        Options.from_user(None, {"disabled_passes": ["softmax_view"]})


@pytest.mark.parametrize("disabled", [(), ("hoisting",)])
def test_a_disabled_pass_does_not_run_through_torch_compile(disabled: tuple[str, ...]) -> None:
    """The hoisting pass moves the arange (a constant) to a prepare graph, a
    stage of the record; disabled, it does not run, and the result is the
    same."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * torch.arange(4.0) + 1

    x = torch.randn(3, 4)
    torch._dynamo.reset()
    options = {"strict": True, "disabled_passes": list(disabled)}
    compiled = torch.compile(fn, backend="mybackend", options=options)
    got, records = compiled_records(lambda: compiled(x))
    torch.testing.assert_close(got, fn(x))
    (record,) = records
    assert ("hoisting" in [name for name, _ in record.stage_times]) == (not disabled)


def test_one_recompile_after_all_passes_and_only_after_a_change() -> None:
    ctx = _context()
    calls = _counting_recompiles(ctx)
    run_passes([GraphPass("first", always, _add_one), GraphPass("second", always, _add_one)], ctx)
    assert len(calls) == 1
    assert torch.equal(ctx.gm(torch.tensor([-1.0, 2.0])), torch.tensor([3.0, 5.0]))

    unchanged = _context()
    calls = _counting_recompiles(unchanged)
    run_passes([_recording("nothing", [], changes=0)], unchanged)
    assert calls == []


def test_the_joint_graph_leaves_its_recompile_to_the_partitioner() -> None:
    ctx = _context("joint")
    calls = _counting_recompiles(ctx)
    run_passes([GraphPass("first", always, _add_one)], ctx, recompile=False)
    assert calls == []


def test_timings_are_recorded_and_changed_passes_are_stages() -> None:
    ctx = run_passes(
        [_recording("changed", [], changes=3), _recording("unchanged", [], changes=0)], _context()
    )
    assert [(name, changes) for name, _, changes in ctx.times] == [("changed", 3), ("unchanged", 0)]
    assert all(seconds >= 0.0 for _, seconds, _ in ctx.times)
    assert [name for name, _ in ctx.stage_times()] == ["changed"]


def test_a_pass_that_raises_is_named() -> None:
    def broken(ctx: PassContext) -> int:
        raise KeyError("no such node")

    ran: list[str] = []
    passes = [
        _recording("fine", ran),
        GraphPass("broken", always, broken),
        _recording("after", ran),
    ]
    with pytest.raises(
        PassError, match=r"graph pass 'broken' failed on graph9.inference: KeyError"
    ) as caught:
        run_passes(passes, _context())
    assert caught.value.pass_name == "broken"
    assert isinstance(caught.value.__cause__, KeyError)
    assert ran == ["fine"]


def test_the_graph_after_each_changing_pass_is_dumped(tmp_path: Path) -> None:
    ctx = _context(dump_dir=str(tmp_path))
    passes = [GraphPass("plus", always, _add_one), _recording("nothing", [], changes=0)]
    run_passes(passes, ctx)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph9.inference.pass0.plus.txt"]
    assert "add" in (tmp_path / "graph9.inference.pass0.plus.txt").read_text()


def test_the_pass_lists() -> None:
    names = [[p.name for p in passes] for passes in pipeline.LISTS]
    assert names == [
        ["causal_masks", "attention_masks", "cross_entropy", "resampling"],
        ["layout", "padding"],
        ["input_mutations", "empty_pads", "identity_copies", "patch_convolutions", "padding",
         "layout", "grouped_conv_biases", "hoisting",
         "batch_norm_gradients", "casts_after_views", "widening_casts", "scatter_adds",
         "slice_scatters", "permuted_cats", "gathered_tables", "transposed_operands",
         "softmax_views",
         "views_after_elementwise"],
    ]  # fmt: skip
    for passes in pipeline.LISTS:
        assert len({p.name for p in passes}) == len(passes), "a name is a stage: one per list"


def test_a_failing_pass_in_the_pipeline_is_named_in_the_fallback_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(gm: torch.fx.GraphModule, **kwargs: object) -> int:
        raise RuntimeError("injected")

    monkeypatch.setattr(pipeline, "write_permuted_cats", broken)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.relu(x) * 2, backend="mybackend")
    with pytest.warns(
        UserWarning, match=r"graph pass 'permuted_cats' failed on graph\d+\.inference"
    ):
        out = compiled(torch.randn(4))
    assert out.shape == (4,)
