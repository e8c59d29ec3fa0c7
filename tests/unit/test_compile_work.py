"""How much work one compile does, counted (issue 35 item 2, cold compile).

Each test counts a kind of work a compile could repeat or do needlessly
(a joint trace of a graph that needs no gradient, a code generation of a
module nothing runs, a FakeTensor propagation, a parse of a stack trace)
and asserts the count, never a time (Note [Tests assert behaviour, never
time] in tests/testing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch._dynamo.utils import compilation_time_metrics
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import mybackend.aot
import mybackend.lowering
import mybackend.passes.layout
import mybackend.passes.matmul_padding
from benchmarks import compile_breakdown, cuda_simulation
from mybackend import compile_times
from mybackend.decompositions import decomposition_table
from mybackend.lowering.graph_modules import recompile_lazily
from mybackend.options import Options
from mybackend.passes import pipeline
from mybackend.passes.driver import PassContext, run_passes
from mybackend.passes.pipeline import PER_GRAPH
from tests.testing import compiled_records

JOINT_TRACE = "aot_trace_joint_graph"  # torch's timer of the joint trace: one entry per trace


def _joint_traces() -> int:
    return len(compilation_time_metrics.get(JOINT_TRACE, []))


def _counts() -> dict[str, int]:
    return {**compile_times.counts(), "joint traces": _joint_traces()}


def _added(before: dict[str, int]) -> dict[str, int]:
    after = _counts()
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(F.gelu(self.a(x)))
        return out


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "frozen parameters"])
def test_graphs_that_need_no_gradient_are_never_traced_jointly(mode: str) -> None:
    """No joint forward-backward trace, no partition: one inference graph."""
    torch._dynamo.reset()
    model = _Block()
    if mode == "frozen parameters":
        model.requires_grad_(False)
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(
        mode, torch.enable_grad
    )
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    before = _counts()
    with context():
        _, records = compiled_records(lambda: compiled(torch.randn(4, 8)))
    assert [r.kind for r in records] == ["inference"]
    assert _added(before) == {
        compile_times.AOT_COMPILES: 1,
        compile_times.LOWERINGS: 1,
        compile_times.CORE_PLANS: 1,
    }


def test_a_training_graph_is_traced_jointly_and_partitioned_once() -> None:
    """The counters the test above reads do count a training compile."""
    torch._dynamo.reset()
    compiled = torch.compile(_Block(), backend="mybackend", options={"strict": True})
    before = _counts()
    compiled(torch.randn(4, 8)).sum().backward()
    assert _added(before) == {
        "joint traces": 1,
        compile_times.JOINT_PARTITIONS: 1,
        compile_times.AOT_COMPILES: 2,
        compile_times.LOWERINGS: 2,
        compile_times.CORE_PLANS: 2,
    }


@pytest.fixture
def code_generations(monkeypatch: pytest.MonkeyPatch) -> list[torch.fx.GraphModule]:
    """Every generation of a graph module's Python code, lazy modules' included."""
    generated: list[torch.fx.GraphModule] = []
    real = torch.fx.GraphModule.recompile

    def counting(self: torch.fx.GraphModule) -> Any:
        generated.append(self)
        return real(self)

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counting)
    return generated


@pytest.fixture
def generations_while_compiling(
    monkeypatch: pytest.MonkeyPatch, code_generations: list[torch.fx.GraphModule]
) -> dict[str, int]:
    """Code generations inside mybackend's compile of each ATen graph, by kind."""
    during: dict[str, int] = {}
    compile_now = mybackend.aot._compile_now

    def counting(gm: torch.fx.GraphModule, inputs: Any, name: str, kind: str, *args: Any) -> Any:
        start = len(code_generations)
        try:
            return compile_now(gm, inputs, name, kind, *args)
        finally:
            during[kind] = during.get(kind, 0) + len(code_generations) - start

    monkeypatch.setattr(mybackend.aot, "_compile_now", counting)
    return during


class _TiedEmbedding(torch.nn.Module):
    """Its backward sums the output layer's weight gradient and the lookup's
    scatter: the scatter-add pass rewrites that backward graph."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 16)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.tanh(self.embedding(tokens)), self.embedding.weight)


def test_a_rewritten_backward_graph_generates_its_code_only_when_read(
    generations_while_compiling: dict[str, int], code_generations: list[torch.fx.GraphModule]
) -> None:
    """Note [Backward graphs recompiled lazily]: aot_autograd hands over the
    backward graph as a plain module; the passes that rewrite it leave its
    code to be generated when something reads or runs it."""
    torch._dynamo.reset()
    model = _TiedEmbedding()
    tokens = torch.randint(0, 50, (2, 6))
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    loss, _ = compiled_records(lambda: compiled(tokens).square().sum())
    _, records = compiled_records(lambda: loss.backward())
    (backward,) = records
    assert "scatter_adds" in [stage for stage, _ in backward.stage_times]  # it was rewritten
    assert generations_while_compiling == {"forward": 0, "backward": 0}
    before = len(code_generations)
    assert "index_put" in backward.gm.code  # the rewritten graph's code, made on demand
    assert code_generations[before:] == [backward.gm]
    compiled_grad = model.embedding.weight.grad
    model.embedding.weight.grad = None
    model(tokens).square().sum().backward()
    torch.testing.assert_close(compiled_grad, model.embedding.weight.grad)


def test_a_lazily_recompiled_plain_module_runs_its_new_graph(
    code_generations: list[torch.fx.GraphModule],
) -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    for node in gm.graph.nodes:
        if node.target is torch.relu:
            node.target = torch.tanh
    holder = gm  # whoever holds the module sees the new code: it is the same object
    traced = len(code_generations)  # symbolic_trace generated the old code
    recompile_lazily(gm)
    assert code_generations[traced:] == []
    x = torch.randn(5)
    torch.testing.assert_close(holder(x), torch.tanh(x) + 1)
    torch.testing.assert_close(gm(x), torch.tanh(x) + 1)
    assert code_generations[traced:] == [gm]  # once, at the first call


def _fake_cuda_inference_graph() -> torch.fx.GraphModule:
    """An inference graph of CUDA tensors as aot_autograd traces it: a
    convolution (the layout plan applies) and an aligned product (nothing
    to pad)."""

    def model(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor) -> Any:
        y = F.relu(F.conv2d(x, w, b, padding=1))
        return F.linear(y.mean((2, 3)), w2)

    with FakeTensorMode():
        shapes = [(2, 8, 6, 6), (16, 8, 3, 3), (16,), (32, 16)]
        inputs = [torch.empty(s, device="cuda") for s in shapes]
        return make_fx(model, decomposition_table=decomposition_table())(*inputs)


@pytest.fixture
def propagated(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.Node]]:
    """Every node whose FakeTensor value a pass recomputed."""
    nodes: list[torch.fx.Node] = []
    run_node = FakeTensorProp.run_node

    def counting(self: Any, node: torch.fx.Node) -> Any:
        nodes.append(node)
        return run_node(self, node)

    monkeypatch.setattr(FakeTensorProp, "run_node", counting)  # what _Propagation runs
    yield nodes


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_the_passes_of_an_inference_graph_propagate_each_node_at_most_once(
    monkeypatch: pytest.MonkeyPatch, propagated: list[torch.fx.Node]
) -> None:
    """Only the layout plan recomputes FakeTensor values (Note [Incremental
    propagation]): each node once, and only those downstream of what it
    converted. The padding pass, with nothing to pad, copies nothing."""
    gm = _fake_cuda_inference_graph()
    layout_copies = _spy(monkeypatch, mybackend.passes.layout, "copy_graph")
    padding_copies = _spy(monkeypatch, mybackend.passes.matmul_padding, "copy_graph")
    values = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    ctx = PassContext(gm, values, "inference", "graph0.inference", Options.from_user(None, {}))
    run_passes(PER_GRAPH, ctx)
    assert [name for name, _, changes in ctx.times if changes] == ["layout"]
    assert len(layout_copies) == 1 and padding_copies == []
    computed = [n for n in propagated if n.op not in ("placeholder", "output")]
    assert len(computed) == len(set(computed))  # no node twice
    assert 0 < len(computed) < len(ctx.gm.graph.nodes)  # not the whole graph


def test_lowering_parses_each_distinct_stack_trace_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x * 2 + 1) - 3)
    traces = ['File "a.py", line 1, in f\n    y = g(x)\n', 'File "b.py", line 7, in g\n    z\n']
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    for i, node in enumerate(calls):
        node.meta["stack_trace"] = traces[i % 2]
    parsed = _spy(monkeypatch, mybackend.lowering, "_trace_source_line")
    lowered = mybackend.lowering.lower(gm, [torch.randn(3)])
    assert len(calls) == 4 and len(parsed) == 2
    text = lowered.graph.to_text(True)
    assert "a.py:1: y = g(x)" in text and "b.py:7: z" in text


def test_the_breakdown_shows_the_joint_passes_apart_from_the_partitioner() -> None:
    stages = {"aot_autograd metadata": 1.0, compile_times.PARTITION: 3.0, "rest of the call": 2.0}
    split = compile_breakdown.split_joint_passes(stages, 1.25)
    assert list(split) == [
        "aot_autograd metadata",
        compile_times.PARTITION,
        compile_breakdown.JOINT_STAGE,
        "rest of the call",
    ]
    assert split[compile_times.PARTITION] == 1.75 and split[compile_breakdown.JOINT_STAGE] == 1.25
    assert compile_breakdown.split_joint_passes(stages, 0.0) == stages


def test_as_cuda_traces_cpu_graphs_as_cuda_graphs_and_restores_the_cpu_path() -> None:
    # Note [A CUDA compile on the CPU]
    import mybackend.ops.batch_norm as batch_norm
    import mybackend.ops.cross_entropy as cross_entropy
    import mybackend.ops.interpolate as interpolate

    gates = [(m, "REWRITTEN_DEVICES") for m in (batch_norm, cross_entropy, interpolate)]
    patched = ((mybackend.aot, "decomposition_table"), *gates)
    rewrites = ((pipeline, "plan_channels_last"), (pipeline, "pad_matmuls"))

    def state() -> list[Any]:
        return [vars(module)[name] for module, name in (*patched, *rewrites)]

    saved = state()
    with cuda_simulation.as_cuda():
        table, *rest = state()
        devices, partials = rest[: len(gates)], rest[len(gates) :]
        assert table([torch.randn(2)]) is decomposition_table()  # not the CPU table
        assert all("cpu" in d for d in devices)
        assert all("cpu" in rewrite.keywords["device_types"] for rewrite in partials)
    assert state() == saved
