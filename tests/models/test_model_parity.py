"""Forward and backward parity with eager on small models (CPU and GPU)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from tests.models.models import MLP, ConvBN, GraphBreaks, TransformerBlock
from tests.testing import compiled_records, nodes_run_in_partitions

CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "mlp": (MLP, lambda: torch.randn(8, 32)),
    "cnn_bn": (ConvBN, lambda: torch.randn(4, 3, 16, 16)),
    "transformer_block": (TransformerBlock, lambda: torch.randn(2, 10, 32)),
    "graph_breaks": (GraphBreaks, lambda: torch.randn(4, 16)),
}


def _train_step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return out.detach(), grads


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_forward_backward_parity(name: str, training: bool, device: str) -> None:
    make_model, make_input = CASES[name]
    eager = make_model().to(device).train(training)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="mybackend", options={"strict": True})
    x = make_input().to(device)

    expected_out, expected_grads = _train_step(eager, x)
    (out, grads), records = compiled_records(lambda: _train_step(compiled, x))

    torch.testing.assert_close(out, expected_out, rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # Buffers (BatchNorm running statistics) are mutated exactly as in eager.
    for got, want in zip(compiled_model.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert records, "the backend compiled no graph"
    assert all(r.core_report is not None for r in records), [r.fallback_reason for r in records]
    assert {r.kind for r in records} >= {"forward"}
    assert nodes_run_in_partitions(records) > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_inference_under_no_grad(name: str, device: str) -> None:
    make_model, make_input = CASES[name]
    model = make_model().to(device).eval()
    x = make_input().to(device)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        expected = model(x)
        got, records = compiled_records(lambda: compiled(x))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert records and {r.kind for r in records} == {"inference"}
    assert nodes_run_in_partitions(records) > 0


def test_graph_breaks_each_subgraph_compiles(device: str) -> None:
    model = GraphBreaks().to(device)
    x = torch.randn(4, 16, device=device)
    expected_graphs = torch._dynamo.explain(model)(x).graph_count
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.inference_mode():
        out, records = compiled_records(lambda: compiled(x))
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    dynamo_graphs = {r.name.split(".")[0] for r in records}
    assert expected_graphs >= 2
    assert len(dynamo_graphs) == expected_graphs, sorted(r.name for r in records)
    assert all(r.core_report is not None for r in records)


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic_true", "automatic_dynamic"])
def test_dynamic_shapes_three_batch_sizes(dynamic: bool | None, device: str) -> None:
    model = MLP().to(device)
    compiled = torch.compile(model, backend="mybackend", dynamic=dynamic, options={"strict": True})
    all_records = []
    for batch in (3, 7, 12):
        x = torch.randn(batch, 32, device=device)
        out, records = compiled_records(lambda x=x: compiled(x))
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
        all_records += records
    symbolic = [r for r in all_records if "s" in r.ir_text and "int = s" in r.ir_text]
    assert symbolic, "no graph carried a symbolic size"
    # Dynamic graphs serve later batch sizes without recompiling.
    assert len(all_records) <= 2 * 2
