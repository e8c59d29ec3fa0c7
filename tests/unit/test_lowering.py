"""Stage 3: ATen FX graphs -> IR text."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower, source_line


def _aten_graph(fn, *inputs, mode: str = "fake"):  # type: ignore[no-untyped-def]
    return make_fx(fn, tracing_mode=mode)(*inputs)


def test_text_form_of_a_small_graph() -> None:
    gm = _aten_graph(lambda x, y: torch.relu(x + y * 2), torch.randn(2, 3), torch.randn(2, 3))
    text = lower(gm, []).graph.to_text()
    assert text.startswith("graph(%0: f32[2, 3]{3, 1} cpu, %1: f32[2, 3]{3, 1} cpu):")
    assert "aten::mul.Tensor(%1, 2)" in text
    assert "aten::add.Tensor(%0, %2, 1)" in text  # alpha=1 filled from the schema default
    assert "aten::relu.default(%3)" in text
    assert text.rstrip().endswith("return (%4)")


def test_multi_output_ops_and_getitem_fold_into_values() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean_std = torch.var_mean(x, dim=1)
        parts = torch.split(x, 2, dim=1)
        return mean_std[1] + 1, parts[1]

    gm = _aten_graph(fn, torch.randn(3, 4))
    lowered = lower(gm, [])
    text = lowered.graph.to_text()
    assert "getitem" not in text
    assert "%1: f32[3]{1} cpu, %2: f32[3]{1} cpu = aten::var_mean.correction" in text
    assert "= aten::split.Tensor(%0, 2, 1)" in text
    assert lowered.graph.num_nodes == 3


def test_aliases_lower_to_their_input_unless_returned() -> None:
    """Note [Aliases are free]: an inner alias is its input's value (no IR
    node, so elementwise neighbours fuse across it); a returned one stays."""
    alias = torch.ops.aten.alias.default

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.tanh(x)
        return alias(alias(t)) * 2, alias(t)

    lowered = lower(_aten_graph(fn, torch.randn(4, 3)), [])
    text = lowered.graph.to_text()
    assert text.count("aten::alias.default") == 1, text
    assert "aten::mul.Tensor(%1, 2)" in text, text  # reads tanh's value directly
    assert lowered.graph.num_nodes == 3


def test_aliased_elementwise_chain_is_one_generated_kernel() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    alias = torch.ops.aten.alias.default
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(8, 16, device="cuda")
    gm = make_fx(lambda x: 1 - alias(alias(torch.tanh(x))) ** 2, tracing_mode="fake")(x)
    lowered = lower(gm, [])
    report = _C.compile(lowered.graph, {"generated_kernels": True}, None).report()
    assert [k["kind"] for k in report["kernels"]] == ["pointwise"], report["kernels"]


def test_symbolic_sizes_are_carried() -> None:
    gm = _aten_graph(lambda x: x.view(-1) * x.shape[0], torch.randn(5, 3), mode="symbolic")
    text = lower(gm, []).graph.to_text()
    assert "f32[s" in text
    assert "builtin::" in text or "aten::sym_size.int" in text


def test_dtype_device_and_layout_arguments() -> None:
    gm = _aten_graph(
        lambda x: x.to(torch.bfloat16).to(memory_format=torch.channels_last),
        torch.randn(1, 2, 3, 4),
    )
    text = lower(gm, []).graph.to_text()
    assert "bfloat16" in text
    assert "bf16[1, 2, 3, 4]" in text


def test_constants_become_inputs() -> None:
    class WithConstant(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.tensor([1.0, 2.0])

    gm = _aten_graph(WithConstant(), torch.randn(2))
    lowered = lower(gm, [])
    assert len(lowered.constants) == 1
    assert lowered.graph.to_text().count("f32[2]{1} cpu") >= 2


def test_nodes_without_schema_run_in_python() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(3)
    y = graph.call_function(torch.sin, (x,))  # a torch function, not an ATen overload
    y.meta["val"] = torch.empty(3)
    graph.output((y,))
    gm = torch.fx.GraphModule({}, graph)
    lowered = lower(gm, [])
    assert "python::sin(%0)" in lowered.graph.to_text()
    core = _C.compile(lowered.graph, {}, lowered.run_python_node)
    value = torch.randn(3)
    torch.testing.assert_close(core.run([value])[0], torch.sin(value))
    assert core.stats()["nodes_run_in_python"] == 1


def test_builtins_lower_to_builtin_nodes() -> None:
    graph = torch.fx.Graph()
    a = graph.placeholder("a")
    a.meta["val"] = 4
    b = graph.call_function(operator.mul, (a, 3))
    b.meta["val"] = 12
    graph.output((b,))
    lowered = lower(torch.fx.GraphModule({}, graph), [])
    assert "builtin::mul(%0, 3)" in lowered.graph.to_text()
    assert _C.compile(lowered.graph).run([5]) == [15]


def test_source_line_comes_from_the_stack_trace() -> None:
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    node.meta["stack_trace"] = 'File "/tmp/model.py", line 12, in forward\n    y = x.item()\n'
    assert source_line(node) == "/tmp/model.py:12: y = x.item()"


def test_graph_builder_rejects_bad_input() -> None:
    builder = _C.GraphBuilder()
    with pytest.raises(_C.Error, match="unknown dtype 'float13'"):
        builder.add_input(("tensor", "float13", "cpu", [1], [1], "x"))
    with pytest.raises(_C.Error, match="malformed device string"):
        builder.add_input(("tensor", "float32", "cuda:x", [1], [1], "x"))
    builder.add_input(("tensor", "float32", "cpu", [1], [1], "x"))
    with pytest.raises(_C.Error, match="uses value %7 before it is defined"):
        builder.add_node("aten", "aten::relu.default", [("v", 7)], [], "r")
