"""Stage 3: input mutations batched into multi-tensor ops (Note [Batched
input mutations] in mybackend/passes/mutations.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.passes.layout import placeholder_values
from mybackend.passes.mutations import batch_input_mutations
from mybackend.reports import collecting

aten = torch.ops.aten


def _traced(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    """An ATen graph of ``fn`` whose nodes carry FakeTensor values, as aot_autograd's do."""
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _calls(gm: torch.fx.GraphModule, target: Any) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


def _epilogue(
    mean1: torch.Tensor, mean2: torch.Tensor, count1: torch.Tensor, count2: torch.Tensor,
    x: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """aot_autograd's shape of batch norm's buffer updates: new values first,
    then one copy_ per mutated input at the end."""
    new1 = mean1 * 0.9 + x.mean(0) * 0.1
    new2 = mean2 * 0.9 + x.amax(0) * 0.1
    next1, next2 = count1 + 1, count2 + 1
    out = x * 2
    mean1.copy_(new1)
    mean2.copy_(new2)
    count1.copy_(next1)
    count2.copy_(next2)
    return out


def _epilogue_inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    counts = [torch.tensor(3, dtype=torch.int64), torch.tensor(7, dtype=torch.int64)]
    return [torch.randn(5), torch.randn(5), *counts, torch.randn(4, 5)]


def _run(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    mutated = [t.clone() for t in inputs]
    return gm(*mutated), mutated


def test_copies_and_counter_increments_become_one_multi_tensor_op_each() -> None:
    inputs = _epilogue_inputs()
    gm = _traced(_epilogue, *inputs)
    expected_out, expected_inputs = _run(gm, inputs)
    assert len(_calls(gm, aten.copy_.default)) == 4

    assert batch_input_mutations(gm) == 4

    assert _calls(gm, aten.copy_.default) == []
    (copies,) = _calls(gm, aten._foreach_copy_.default)
    (adds,) = _calls(gm, aten._foreach_add_.Scalar)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert copies.args[0] == placeholders[:2]
    assert adds.args == (placeholders[2:4], 1)
    assert not any(n.args[0] in placeholders[2:4] for n in _calls(gm, aten.add.Tensor))
    out, mutated = _run(gm, inputs)
    torch.testing.assert_close(out, expected_out)
    for got, want in zip(mutated, expected_inputs, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_lone_copy_is_left_alone() -> None:
    def one(mean: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        mean.copy_(x.sum(0))
        return x + 1

    gm = _traced(one, torch.randn(5), torch.randn(3, 5))
    assert batch_input_mutations(gm) == 0
    assert len(_calls(gm, aten.copy_.default)) == 1


def test_copies_that_must_keep_their_place_are_not_batched() -> None:
    """A target read after its copy (the read sees the new value), a source
    that is a view of an input (it could alias another copy's target), a
    copy that changes dtype: all stay single copies."""

    def mixed(
        a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, e: torch.Tensor,
        h: torch.Tensor, x: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        a.copy_(x.sum(0))
        read_after = a * 3
        b.copy_(c.view(5))  # a view of an input as the source
        d.copy_(x.amax(0))
        e.copy_(x.amin(0))
        h.copy_(x.mean(0))  # float32 into float16
        return read_after

    inputs = [torch.randn(5), torch.randn(5), torch.randn(1, 5), torch.randn(5), torch.randn(5)]
    inputs += [torch.randn(5, dtype=torch.float16), torch.randn(3, 5)]
    gm = _traced(mixed, *inputs)
    expected_out, expected_inputs = _run(gm, inputs)

    assert batch_input_mutations(gm) == 2

    (copies,) = _calls(gm, aten._foreach_copy_.default)
    targets = copies.args[0]
    assert isinstance(targets, list)
    names = [n.name for n in targets if isinstance(n, torch.fx.Node)]
    assert names == ["d_1", "e_1"], names
    assert len(_calls(gm, aten.copy_.default)) == 3
    out, mutated = _run(gm, inputs)
    torch.testing.assert_close(out, expected_out)
    for got, want in zip(mutated, expected_inputs, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_compiled_training_updates_running_statistics_through_multi_tensor_ops() -> None:
    """End to end on the CPU: the forward graph aot_autograd gives mybackend
    has its running statistics' copies and counter adds batched, and the
    buffers match eager's after several steps."""
    torch.manual_seed(0)
    eager = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8)
    )
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, backend="mybackend", options={"strict": True})
    torch._dynamo.reset()
    with collecting() as records:
        for _ in range(3):
            x = torch.randn(4, 3, 10, 10)
            eager(x).sum().backward()
            compiled(x).sum().backward()
    forward = next(r for r in records if r.kind == "forward")
    assert "aten::copy_" not in forward.ir_text
    assert forward.ir_text.count("aten::_foreach_copy_.default") == 1
    assert forward.ir_text.count("aten::_foreach_add_.Scalar") == 1
    for (name, want), got in zip(eager.named_buffers(), compiled_module.buffers(), strict=True):
        torch.testing.assert_close(got, want, msg=name)


def test_symbolic_sizes_are_compared_without_guards() -> None:
    """Dynamic shapes: sizes are compared by expression, so the pass adds no
    guard to the shape environment (the graph is already traced)."""

    def two(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        a.copy_(x.sum(0))
        b.copy_(x.amax(0))
        return x * 2

    gm = make_fx(two, tracing_mode="symbolic")(torch.randn(5), torch.randn(5), torch.randn(3, 5))
    shape_env = placeholder_values(gm)[0].fake_mode.shape_env
    guards = len(shape_env.guards)

    assert batch_input_mutations(gm) == 2

    assert len(shape_env.guards) == guards
    assert len(_calls(gm, aten._foreach_copy_.default)) == 1
