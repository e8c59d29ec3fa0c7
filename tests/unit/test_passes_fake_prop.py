"""Stage 3: FakeTensor propagation after graph rewrites (Note [Incremental
propagation] in mybackend/passes/fake_prop.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from mybackend.passes.fake_prop import Repropagation, insert_clone, same_metadata
from mybackend.passes.layout import placeholder_values

aten = torch.ops.aten


def _two_branches(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A branch that a copy of ``x`` changes, and one it does not touch."""
    a = torch.relu(x) * 2
    b = (a + 1).sum(dim=(2, 3))
    c = torch.tanh(y) + y.exp()
    return b, c.view(-1)


def _graph() -> tuple[torch.fx.GraphModule, list[Any]]:
    gm = make_fx(_two_branches, tracing_mode="fake")(torch.randn(2, 3, 4, 5), torch.randn(6, 7))
    inputs = placeholder_values(gm)
    return gm, inputs


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the nodes FakeTensorProp runs."""
    names: list[str] = []
    original = FakeTensorProp.run_node

    def counting(self: FakeTensorProp, n: torch.fx.Node) -> Any:
        names.append(n.name)
        return original(self, n)

    monkeypatch.setattr(FakeTensorProp, "run_node", counting)
    yield names


def _metadata(gm: torch.fx.GraphModule) -> dict[str, Any]:
    return {n.name: n.meta.get("val") for n in gm.graph.nodes}


def _channels_last_copy_of_x(gm: torch.fx.GraphModule) -> None:
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    relu = next(iter(x.users))
    relu.replace_input_with(x, insert_clone(gm.graph, x, relu, torch.channels_last))


def test_only_the_rewritten_branch_runs_again_and_every_value_matches_a_full_pass(
    runs: list[str],
) -> None:
    gm, inputs = _graph()
    propagation = Repropagation(gm)
    _channels_last_copy_of_x(gm)

    assert propagation.until_view_fails(inputs) is None

    incremental = _metadata(gm)
    ran = set(runs)
    (clone,) = gm.graph.find_nodes(op="call_function", target=aten.clone.default)
    assert {clone.name, "relu", "mul", "add", "sum_1"} <= ran
    assert not {"tanh", "exp", "add_1", "view"} & ran  # the untouched branch kept its values
    assert incremental["relu"].is_contiguous(memory_format=torch.channels_last)
    FakeTensorProp(gm, mode=inputs[0].fake_mode).propagate_dont_convert_inputs(*inputs)
    full = _metadata(gm)
    assert full.keys() == incremental.keys()
    for name, value in full.items():
        assert same_metadata(value, incremental[name]), name


def test_a_second_call_runs_only_what_changed_since_the_first(runs: list[str]) -> None:
    gm, inputs = _graph()
    propagation = Repropagation(gm)
    _channels_last_copy_of_x(gm)
    propagation.until_view_fails(inputs)
    runs.clear()

    assert propagation.until_view_fails(inputs) is None

    assert runs == []  # nothing changed: not even the placeholders run again


def test_a_pass_stopped_by_a_view_is_followed_by_a_full_pass(runs: list[str]) -> None:
    """The failing view's later nodes were never visited, so nothing after a
    failure may be trusted: the next call runs every node."""

    def flatten(x: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x) + 1).view(2, -1) * 3

    gm = make_fx(flatten, tracing_mode="fake")(torch.randn(2, 3, 4, 5))
    inputs = placeholder_values(gm)
    propagation = Repropagation(gm)
    _channels_last_copy_of_x(gm)

    view = propagation.until_view_fails(inputs)

    assert view is not None and view.target is aten.view.default
    source = view.args[0]
    assert isinstance(source, torch.fx.Node)
    view.replace_input_with(source, insert_clone(gm.graph, source, view, torch.contiguous_format))
    runs.clear()
    assert propagation.until_view_fails(inputs) is None
    computed = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    assert set(computed) <= set(runs)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (torch.empty(2, 3), torch.empty(2, 3), True),
        (torch.empty(2, 3), torch.empty(3, 2).t(), False),
        (torch.empty(2, 3), torch.empty(2, 3, dtype=torch.float16), False),
        (torch.empty(6)[1:], torch.empty(5), False),
        ((torch.empty(2), 3), (torch.empty(2), 3), True),
        ((torch.empty(2), 3), (torch.empty(2), 4), False),
        (None, None, True),
        (1, 1.0, False),
    ],
)
def test_metadata_comparison(a: Any, b: Any, same: bool) -> None:
    assert same_metadata(a, b) is same
