"""Whole-graph CUDA-graph capture and replay (Note [CUDA-graph rules])."""

from __future__ import annotations

import pytest
import torch

from tests.models.models import MLP
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

# reduce-overhead's options without the eager floor: these tests count the
# compiled side's replays, and the floor's measuring calls run eagerly
# (Note [Eager is the floor]).
RUNTIME_ONLY = {"cuda_graphs": True, "eager_floor": False}


def _stats(records):  # type: ignore[no-untyped-def]
    total: dict[str, int] = {}
    for record in records:
        for key, value in record.compiled.stats().items():
            total[key] = total.get(key, 0) + value
    return total


def test_replay_follows_changing_input_values_and_addresses() -> None:
    fn = torch.compile(
        lambda x, y: torch.relu(x * 2 + y), backend="mybackend", options=RUNTIME_ONLY
    )
    y = torch.randn(64, device="cuda")
    records = []
    for _ in range(5):
        x = torch.randn(64, device="cuda")  # a new address every call
        out, new = compiled_records(lambda x=x: fn(x, y))
        records += new
        torch.testing.assert_close(out, torch.relu(x * 2 + y))
    x.copy_(torch.randn(64, device="cuda"))  # same address, new values
    torch.testing.assert_close(fn(x, y), torch.relu(x * 2 + y))
    stats = _stats(records)
    assert stats["cuda_graph_captures"] == 1
    assert stats["cuda_graph_replays"] >= 4


def test_inputs_of_several_dtypes_and_layouts_are_copied_in_one_batch() -> None:
    """Note [Batched input copies]: every non-static input is copied into the
    graph's buffers before each replay, whatever its dtype or strides."""

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a * 2 + b.float() + c

    compiled = torch.compile(fn, backend="mybackend", options=RUNTIME_ONLY)
    records = []
    for _ in range(5):
        a = torch.randn(32, 48, device="cuda")
        b = torch.randn(32, 48, device="cuda", dtype=torch.bfloat16)
        c = torch.randn(48, 32, device="cuda").t()  # transposed: the buffer keeps its strides
        out, new = compiled_records(lambda a=a, b=b, c=c: compiled(a, b, c))
        records += new
        torch.testing.assert_close(out, fn(a, b, c))
    stats = _stats(records)
    assert stats["cuda_graph_captures"] == 1 and stats["cuda_graph_replays"] >= 4, stats
    per_call = a.nbytes + b.nbytes + c.nbytes
    assert stats["cuda_graph_input_bytes_copied"] >= 3 * per_call, stats


def test_held_outputs_are_never_overwritten_by_a_replay() -> None:
    fn = torch.compile(lambda x: x.sin() + 1, backend="mybackend", mode="reduce-overhead")
    inputs = [torch.randn(128, device="cuda") for _ in range(4)]
    outputs = [fn(x) for x in inputs]  # each output held while later calls replay
    for x, out in zip(inputs, outputs, strict=True):
        torch.testing.assert_close(out, x.sin() + 1)


def test_host_synchronising_graph_runs_uncaptured_and_says_why() -> None:
    # An integer .item() stays aten._local_scalar_dense in the graph (a float
    # one is traced as tensor arithmetic and never reaches the host).
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().long().item()

    torch._dynamo.config.capture_scalar_outputs = True
    try:
        compiled = torch.compile(fn, backend="mybackend", mode="reduce-overhead")
        x = torch.randn(16, device="cuda") * 5
        records = []
        for _ in range(3):
            out, new = compiled_records(lambda: compiled(x))
            records += new
            torch.testing.assert_close(out, fn(x))
        statuses = [r.core_report["cuda_graphs"] for r in records if r.core_report]
        assert any("synchronises with the host" in s for s in statuses), statuses
    finally:
        torch._dynamo.config.capture_scalar_outputs = False


def test_a_host_scalar_constant_does_not_keep_the_graph_uncaptured() -> None:
    """Note [Host scalars hoisted to the device]: DeBERTa's scale, a 0-dim
    host tensor read by GPU elementwise ops, moves to the GPU once, and the
    graph is captured and replayed."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float) * 2), -1)

    compiled = torch.compile(fn, backend="mybackend", options=RUNTIME_ONLY)
    x = torch.randn(4, 64, device="cuda")
    records = []
    with torch.no_grad():
        for _ in range(4):
            out, new = compiled_records(lambda: compiled(x))
            records += new
            torch.testing.assert_close(out, fn(x))
    statuses = [r.core_report["cuda_graphs"] for r in records if r.core_report]
    assert all(s.startswith("on") for s in statuses), statuses
    stats = _stats(records)
    assert stats["cuda_graph_captures"] == 1 and stats["cuda_graph_replays"] >= 2, stats


def test_training_forward_and_backward_are_replayed() -> None:
    model = MLP().cuda()
    reference = MLP().cuda()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="mybackend", mode="reduce-overhead")
    records = []
    for _ in range(4):
        x = torch.randn(8, 32, device="cuda")
        _, new = compiled_records(lambda x=x: compiled(x).square().mean().backward())
        records += new
        reference(x).square().mean().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    kinds = {r.kind for r in records}
    assert kinds == {"forward", "backward"}
    assert all(r.compiled.stats()["cuda_graph_replays"] > 0 for r in records)


def test_backward_reads_the_forwards_saved_activations_in_place() -> None:
    # Note [Borrowed graph memory]: once both graphs are captured, a training
    # step copies only the backward's other inputs (the output's gradient and
    # the parameters it saves), never the activations, and moves nothing out
    # of the forward's memory (autograd has freed them by the next forward).
    torch.manual_seed(0)
    model = MLP(width=256, depth=4).cuda()
    reference = MLP(width=256, depth=4).cuda()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="mybackend", options=RUNTIME_ONLY)
    x = torch.randn(1024, 256, device="cuda")
    records = []
    for _ in range(4):
        _, new = compiled_records(lambda: compiled(x).square().mean().backward())
        records += new
    by_kind = {r.kind: r.compiled for r in records}
    before = {kind: dict(c.stats()) for kind, c in by_kind.items()}
    steps = 3
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        compiled(x).square().mean().backward()
    reference(x).square().mean().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)

    def grew(kind: str, key: str) -> int:
        return by_kind[kind].stats()[key] - before[kind][key]

    assert grew("forward", "cuda_graph_replays") == steps
    assert grew("backward", "cuda_graph_replays") == steps
    # Copied: the output's gradient, the input x (saved for the first weight
    # gradient, the caller's own tensor) and at most the parameters.
    x_bytes = x.numel() * 4
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    activation_bytes = 2 * 4 * x_bytes  # two per layer (Linear and LayerNorm inputs), at least
    copied = grew("backward", "cuda_graph_input_bytes_copied") / steps
    assert param_bytes < activation_bytes
    assert copied <= 2 * x_bytes + param_bytes, (copied, x_bytes, param_bytes)
    moved = grew("forward", "cuda_graph_output_bytes_moved")
    assert moved == 0, moved
