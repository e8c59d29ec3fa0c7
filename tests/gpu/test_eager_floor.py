"""GPU-marked: the eager floor on real CUDA graphs (Note [Eager is the floor]
in mybackend/eager_floor.py). One side is slowed by a GPU spin of millions
of cycles, so the choice does not depend on how fast the machine is; every
call, while measuring and after, must compute eager's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from mybackend.compiled import CompiledGraphFunction, UserGraphFloorCall
from mybackend.eager_floor import COMPILED, EAGER
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

SPIN_CYCLES = 20_000_000  # about 10 ms on any current GPU: far beyond the graph itself
CALLS = 24  # enough for the floor's warm-up, samples and choice


def _slowed(method: Any) -> Any:
    def slow(self: Any, args: list[Any]) -> Any:
        torch.cuda._sleep(SPIN_CYCLES)
        return method(self, args)

    return slow


def _spin_ms() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(SPIN_CYCLES)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 32)]
    return nn.Sequential(*layers).cuda()


def _floors(records: list[Any]) -> list[Any]:
    """The floors of the dynamo graphs these graphs were compiled for."""
    return list({id(r.floor): r.floor for r in records if r.floor is not None}.values())


@pytest.mark.parametrize("slow_side", [COMPILED, EAGER])
@pytest.mark.parametrize("cuda_graphs", [False, True], ids=["default", "cuda-graphs"])
def test_inference_runs_the_faster_side(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, slow_side: str, cuda_graphs: bool
) -> None:
    # Note [Eager is the floor]: the eager side is the user's graph itself.
    owner, slowed = (
        (CompiledGraphFunction, "_run_compiled")
        if slow_side == COMPILED
        else (UserGraphFloorCall, "_run_user_graph")
    )
    monkeypatch.setattr(owner, slowed, _slowed(getattr(owner, slowed)))
    model = _mlp().eval()
    options = {"cuda_graphs": cuda_graphs, "kernel_cache_dir": str(tmp_path), "strict": True}
    compiled = torch.compile(model, backend="mybackend", options=options)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        want = model(x)

        def calls() -> None:
            for _ in range(CALLS):
                torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-4)

        _, records = compiled_records(calls)
    (floor,) = _floors(records)
    faster = EAGER if slow_side == COMPILED else COMPILED
    assert floor.choice == faster, floor.describe()
    assert list((tmp_path / "eager-floor").glob("*.json")), "the choice was not kept"


def test_a_training_step_is_timed_whole_against_the_users_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Note [A training step is timed whole]: the compiled forward and backward
    # are slowed; the floor in front of the dynamo graph must see it in the
    # step's cost and hand the calls to the user's graph, with equal gradients.
    monkeypatch.setattr(
        CompiledGraphFunction, "_run_compiled", _slowed(CompiledGraphFunction._run_compiled)
    )
    step_floors: list[UserGraphFloorCall] = []
    original_init = UserGraphFloorCall.__init__

    def init(self: UserGraphFloorCall, *args: Any) -> None:
        original_init(self, *args)
        step_floors.append(self)

    monkeypatch.setattr(UserGraphFloorCall, "__init__", init)
    model = _mlp()
    reference = _mlp()
    compiled = torch.compile(model, backend="mybackend", options={"kernel_cache_dir": "off"})
    x = torch.randn(8, 64, device="cuda")

    def steps() -> None:
        for _ in range(CALLS):
            for m, f in ((model, compiled), (reference, reference)):
                m.zero_grad(set_to_none=True)
                f(x).pow(2).mean().backward()
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)

    _, records = compiled_records(steps)
    assert {r.name.rsplit(".", 1)[-1] for r in records} >= {"forward", "backward"}
    (step,) = step_floors
    assert _floors(records) == [step.floor]  # explain() shows it with the forward
    assert step.floor.choice == EAGER, step.floor.describe()
    # The backward counted: each half spins once, so a compiled step costs
    # about two spins; the forward alone would cost one.
    assert step.floor.compiled_ms is not None and step.floor.compiled_ms > 1.5 * _spin_ms()
    # No hook of the floor's stays on a parameter.
    assert all(not p._backward_hooks for p in model.parameters())


def test_a_later_process_starts_with_the_kept_choice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        CompiledGraphFunction, "_run_compiled", _slowed(CompiledGraphFunction._run_compiled)
    )
    options = {"kernel_cache_dir": str(tmp_path)}
    x = torch.randn(8, 64, device="cuda")
    model = _mlp().eval()
    with torch.no_grad():
        first = torch.compile(model, backend="mybackend", options=options)

        def calls() -> None:
            for _ in range(CALLS):
                first(x)
                # The choice waits for the last timed call's events; without a
                # host sync the spun GPU would still be behind after CALLS.
                torch.cuda.synchronize()

        _, records = compiled_records(calls)
        assert _floors(records)[0].choice == EAGER
        torch._dynamo.reset()  # what a new process starts from, but for the folder
        again = torch.compile(model, backend="mybackend", options=options)
        out, records = compiled_records(lambda: again(x))
    (floor,) = _floors(records)
    assert floor.from_cache and floor.choice == EAGER
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


def test_the_option_turns_it_off() -> None:
    model = _mlp().eval()
    compiled = torch.compile(model, backend="mybackend", options={"eager_floor": False})
    with torch.no_grad():
        _, records = compiled_records(lambda: compiled(torch.randn(8, 64, device="cuda")))
    assert _floors(records) == []
