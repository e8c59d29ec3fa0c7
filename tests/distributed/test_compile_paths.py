"""What torch.distributed's compile paths expect of the backend, in one
process (mybackend/distributed.py): the aot_autograd count DDPOptimizer
reads, compiled autograd's list input, and graphs with collectives."""

from __future__ import annotations

import copy
import operator
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

import mybackend.aot
from mybackend.distributed import flatten_list_input, has_collectives
from tests.testing import compiled_records


def _aot_count() -> int:
    return int(counters["aot_autograd"]["total"])


def test_each_aot_compile_is_counted_for_ddp_optimizer() -> None:
    """DDPOptimizer records a bucket's metadata only when this count moved
    (Note [DDPOptimizer counts aot_autograd compiles])."""
    before = _aot_count()
    f = torch.compile(lambda x: torch.sin(x) * 2, backend="mybackend")
    f(torch.randn(4, requires_grad=True)).sum().backward()
    assert _aot_count() == before + 1


def test_a_graph_aot_could_not_trace_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs as dynamo's graph, without a lazy backward to pair with."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected aot_autograd failure")

    monkeypatch.setattr(mybackend.aot, "aot_module_simplified", broken)
    before = _aot_count()
    f = torch.compile(lambda x: torch.cos(x) + 1, backend="mybackend")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = f(torch.zeros(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert _aot_count() == before


def test_compiled_autograd_backward_is_compiled_with_eager_gradients() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1)
    )
    reference = copy.deepcopy(model)

    def step(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = module(x).sum()
        loss.backward()
        return loss

    with torch._dynamo.config.patch(compiled_autograd=True):
        compiled = torch.compile(step, backend="mybackend", options={"strict": True})
    x = torch.randn(4, 8)
    loss, records = compiled_records(lambda: compiled(model, x))
    torch.testing.assert_close(loss, step(reference, x))
    for got, expected in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, expected.grad)
    # The forward, and the backward as a graph of its own (its list input flattened).
    assert [r.kind for r in records] == ["forward", "inference"]
    assert all(r.has_core_report for r in records)


def _list_input_graph() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    boxed = graph.placeholder("inputs")
    boxed.meta["steal_arg"] = True
    scale = graph.placeholder("scale")
    first = graph.call_function(operator.getitem, (boxed, 0))
    second = graph.call_function(operator.getitem, (boxed, 1))
    total = graph.call_function(torch.ops.aten.add.Tensor, (first, second))
    graph.output((graph.call_function(torch.ops.aten.mul.Tensor, (total, scale)),))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_list_input_becomes_one_placeholder_per_element() -> None:
    gm = _list_input_graph()
    tensors = [torch.ones(2), torch.full((2,), 2.0)]
    flat = flatten_list_input(gm, [tensors, torch.full((2,), 3.0)])
    assert flat is not None
    flat_gm, flat_inputs, empty_list = flat
    assert empty_list
    assert [n.op for n in flat_gm.graph.nodes].count("placeholder") == 3
    assert len(flat_inputs) == 3
    (out,) = flat_gm(*flat_inputs)
    assert out.tolist() == [9.0, 9.0]


def test_other_nested_inputs_are_left_alone() -> None:
    gm = _list_input_graph()
    assert flatten_list_input(gm, [(torch.ones(2),), torch.ones(2)]) is None  # a tuple
    assert flatten_list_input(gm, [[torch.ones(2)], [torch.ones(2)]]) is None  # two lists


def test_collectives_are_found_by_their_namespace() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    reduced = graph.call_function(torch.ops._c10d_functional.all_reduce.default, (x, "sum", "0"))
    graph.output((graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (reduced,)),))
    assert has_collectives(torch.fx.GraphModule(torch.nn.Module(), graph))
    assert not has_collectives(_list_input_graph())


def test_collectives_called_through_their_packet_are_found() -> None:
    """Compiled autograd's graph of DDP's python reducer calls the packet
    ``_c10d_functional.all_reduce`` (seen on two GPUs), not an overload."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    reduced = graph.call_function(torch.ops._c10d_functional.all_reduce, (x, "sum", "0"))
    graph.output((graph.call_function(torch.ops._c10d_functional.wait_tensor, (reduced,)),))
    assert has_collectives(torch.fx.GraphModule(torch.nn.Module(), graph))
    plain = torch.fx.Graph()
    y = plain.placeholder("y")
    plain.output((plain.call_function(torch.ops.aten.relu, (y,)),))
    assert not has_collectives(torch.fx.GraphModule(torch.nn.Module(), plain))
