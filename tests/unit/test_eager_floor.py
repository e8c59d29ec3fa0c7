"""The eager floor's decisions (Note [Eager is the floor] in
mybackend/eager_floor.py), driven by a scripted timer: which side runs each
call, when the choice is made, the margin, the shape filter, captures, a
failing eager side, and the choice kept on disk."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from mybackend.compiled import UserGraphFloorCall, is_training_graph, with_user_graph_floor
from mybackend.eager_floor import (
    COMPILED,
    EAGER,
    CudaCallTimer,
    EagerFloor,
    FloorSettings,
    StepTimer,
    floor_cache_file,
)
from mybackend.options import Options
from mybackend.reports import GraphRecord, graph_floor
from tests.testing import compiled_records

SETTINGS = FloorSettings(warmup=2, samples=3, margin=0.05)


class ScriptedTimer:
    """Costs per side instead of clocks; records complete when `done` says."""

    def __init__(self, compiled_ms: float, eager_ms: float) -> None:
        self.cost = {COMPILED: compiled_ms, EAGER: eager_ms}
        self.capturing = False
        self.done = True
        self.side = ""

    def can_time(self) -> bool:
        return not self.capturing

    def start(self, inputs: Any = ()) -> Any:
        return None

    def stop(self, started: Any, outputs: Any = None) -> Any:
        return self.side

    def close(self) -> None:
        pass

    def ready(self, timed: Any) -> bool:
        return self.done

    def cost_ms(self, timed: Any) -> float:
        return self.cost[timed]


class Sides:
    """The two boxed callables; each records its calls and empties the list."""

    def __init__(self, timer: ScriptedTimer, fail_eager: bool = False) -> None:
        self.calls: list[str] = []
        self.timer = timer
        self.fail_eager = fail_eager

    def compiled(self, args: list[Any]) -> list[Any]:
        return self._run(COMPILED, args)

    def eager(self, args: list[Any]) -> list[Any]:
        if self.fail_eager:
            raise torch.OutOfMemoryError("eager needs more memory")
        return self._run(EAGER, args)

    def _run(self, side: str, args: list[Any]) -> list[Any]:
        self.timer.side = side
        self.calls.append(side)
        inputs = list(args)
        args.clear()
        return [inputs[0] * 2]


def _drive(floor: EagerFloor, sides: Sides, calls: int, x: torch.Tensor) -> None:
    for _ in range(calls):
        if floor.choice is None:
            out = floor.run([x], sides.compiled, sides.eager)
        else:
            out = (sides.eager if floor.choice == EAGER else sides.compiled)([x])
        assert torch.equal(out[0], x * 2)  # every call computes its outputs


def test_alternates_then_keeps_the_cheaper_side() -> None:
    timer = ScriptedTimer(compiled_ms=4.0, eager_ms=1.0)
    sides = Sides(timer)
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, sides, 2 * SETTINGS.warmup + 2 * SETTINGS.samples, torch.ones(3))
    assert floor.choice is None  # all samples taken; the choice waits for one more call
    warmup = [COMPILED] * SETTINGS.warmup + [EAGER] * SETTINGS.warmup
    assert sides.calls == warmup + [COMPILED, EAGER] * SETTINGS.samples
    _drive(floor, sides, 3, torch.ones(3))
    assert floor.choice == EAGER
    assert (floor.compiled_ms, floor.eager_ms) == (4.0, 1.0)
    assert sides.calls[-2:] == [EAGER, EAGER]
    assert "runs eager" in floor.describe()


def test_compiled_keeps_the_calls_inside_the_margin() -> None:
    timer = ScriptedTimer(compiled_ms=1.0, eager_ms=0.97)  # 3 % cheaper: noise
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, Sides(timer), 20, torch.ones(2))
    assert floor.choice == COMPILED


def test_the_choice_waits_for_the_last_record() -> None:
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    timer.done = False
    sides = Sides(timer)
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, sides, 30, torch.ones(2))
    assert floor.choice is None
    assert sides.calls[-5:] == [COMPILED] * 5  # no more eager runs once sampled
    timer.done = True
    _drive(floor, sides, 1, torch.ones(2))
    assert floor.choice == EAGER


def test_only_the_first_shape_is_timed() -> None:
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    sides = Sides(timer)
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, sides, 2 * SETTINGS.warmup + 1, torch.ones(2))  # one timed call, shape (2,)
    before = list(sides.calls)
    _drive(floor, sides, 4, torch.ones(5))
    assert sides.calls[len(before) :] == [COMPILED] * 4
    assert floor.describe().startswith("eager floor: measuring")


def test_nothing_is_timed_during_a_capture() -> None:
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    timer.capturing = True
    sides = Sides(timer)
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, sides, 10, torch.ones(2))
    assert sides.calls == [COMPILED] * 10 and floor.choice is None


def test_a_failing_eager_side_leaves_the_compiled_graph() -> None:
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    sides = Sides(timer, fail_eager=True)
    floor = EagerFloor("g", None, SETTINGS, timer)
    _drive(floor, sides, 3, torch.ones(2))
    assert floor.choice == COMPILED
    assert sides.calls == [COMPILED] * 3  # the failed call ran compiled on its inputs


def test_the_choice_is_kept_for_the_next_process(tmp_path: Path) -> None:
    x = torch.ones(4)
    path = floor_cache_file(str(tmp_path), "graph text", [x], "options")
    assert path is not None and path.startswith(str(tmp_path))
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    floor = EagerFloor("g", path, SETTINGS, timer)
    _drive(floor, Sides(timer), 20, x)
    assert floor.choice == EAGER and Path(path).exists()

    again = EagerFloor("g", path, SETTINGS, ScriptedTimer(0.0, 0.0))
    assert (again.choice, again.from_cache, again.eager_ms) == (EAGER, True, 1.0)
    assert "(cached)" in again.describe()


def test_the_key_separates_graphs_shapes_and_options(tmp_path: Path) -> None:
    root, x = str(tmp_path), torch.ones(4)
    base = floor_cache_file(root, "graph", [x], "options")
    assert floor_cache_file(root, "graph", [x], "options") == base
    assert floor_cache_file(root, "other graph", [x], "options") != base
    assert floor_cache_file(root, "graph", [torch.ones(5)], "options") != base
    assert floor_cache_file(root, "graph", [x], "other options") != base
    assert floor_cache_file(None, "graph", [x], "options") is None


@pytest.mark.parametrize("content", ["{not json", json.dumps({"version": 1, "choice": "maybe"})])
def test_a_corrupt_choice_file_is_measured_again(tmp_path: Path, content: str) -> None:
    path = tmp_path / "choice.json"
    path.write_text(content)
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    with pytest.warns(UserWarning, match="unreadable choice file"):
        floor = EagerFloor("g", str(path), SETTINGS, timer)
    assert floor.choice is None and not floor.from_cache
    _drive(floor, Sides(timer), 20, torch.ones(2))
    assert floor.choice == EAGER
    assert json.loads(path.read_text())["choice"] == EAGER  # rewritten whole


def test_explain_shows_the_floor_of_each_graph() -> None:
    timer = ScriptedTimer(compiled_ms=3.0, eager_ms=1.0)
    floor = EagerFloor("g", None, SETTINGS, timer)
    record = GraphRecord("g", "inference", "", None, [], floor=floor)
    assert graph_floor(record) == "eager floor: measuring (0 of 3 eager calls timed)"
    _drive(floor, Sides(timer), 20, torch.ones(2))
    assert graph_floor(record) == (
        "eager floor: compiled 3.000 ms, eager 1.000 ms per call: runs eager"
    )
    assert graph_floor(GraphRecord("h", "inference", "", None, [])) is None


class ClockEvent:
    """A CUDA event's stand-in: records the scripted clock when made."""

    clock = [0.0]

    def __init__(self) -> None:
        self.at = ClockEvent.clock[0]

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: ClockEvent) -> float:
        return end.at - self.at


def _advance(ms: float) -> None:
    ClockEvent.clock[0] += ms


class TakesMilliseconds(torch.autograd.Function):
    """Identity whose backward advances the scripted clock."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ms: float) -> torch.Tensor:
        ctx.ms = ms
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        _advance(ctx.ms)
        return grad, None


def test_a_training_call_costs_its_forward_and_its_backward() -> None:
    # Note [A training step is timed whole]
    timer = StepTimer(event=ClockEvent)
    weight = torch.nn.Parameter(torch.ones(3))
    started = timer.start([weight, torch.ones(3)])
    _advance(2.0)
    out = TakesMilliseconds.apply(weight * 2, 3.0).sum()  # its backward: 3 ms
    record = timer.stop(started, (out,))
    assert record.expects_backward and not timer.ready(record)
    _advance(5.0)  # the rest of the step before its backward reaches the graph
    out.register_hook(lambda grad: _advance(7.0))  # a module hook on the output: not ours
    out.backward()
    assert timer.ready(record)
    assert timer.cost_ms(record) == pytest.approx(max(2.0, record.host_ms) + 3.0)
    assert not weight._backward_hooks  # removed when the backward ended


def test_a_tied_parameter_does_not_stretch_the_backward() -> None:
    # The weight is read again before the graph (a tied embedding): its whole
    # gradient exists only after that earlier use's backward; the graph's
    # own backward ends with its activation input's gradient.
    timer = StepTimer(event=ClockEvent)
    weight = torch.nn.Parameter(torch.ones(3))
    embedded = TakesMilliseconds.apply(weight * 1, 11.0)  # backward after the graph's
    hidden = embedded * 2
    started = timer.start([hidden, weight])
    out = TakesMilliseconds.apply(hidden * weight, 3.0).sum()
    record = timer.stop(started, (out,))
    out.backward()
    assert timer.ready(record)
    assert timer.cost_ms(record) == pytest.approx(max(0.0, record.host_ms) + 3.0)


def test_a_call_without_backward_costs_its_forward_and_leaves_no_hook() -> None:
    timer = StepTimer(event=ClockEvent)
    weight = torch.nn.Parameter(torch.ones(3))
    record = timer.stop(timer.start([weight]), ((weight * 2).sum(),))
    assert record.expects_backward and not timer.ready(record)  # never run
    assert weight._backward_hooks
    timer.close()  # the floor settles
    assert not weight._backward_hooks
    with torch.no_grad():
        plain = timer.stop(timer.start([weight]), (weight * 2,))
    assert not plain.expects_backward and timer.ready(plain)


class ScriptedSides:
    """aot_autograd's compiled function and the user's graph, unboxed."""

    def __init__(self, timer: ScriptedTimer) -> None:
        self.timer = timer
        self.calls: list[str] = []

    def compiled(self, *args: Any) -> str:
        return self._run(COMPILED)

    def user_graph(self, *args: Any) -> str:
        return self._run(EAGER)

    def _run(self, side: str) -> str:
        self.timer.side = side
        self.calls.append(side)
        return side


def test_the_floor_runs_the_users_graph_once_eager_wins() -> None:
    timer = ScriptedTimer(compiled_ms=10.0, eager_ms=1.0)
    floor = EagerFloor("step", None, SETTINGS, timer)
    sides = ScriptedSides(timer)
    call = UserGraphFloorCall(sides.compiled, sides.user_graph, floor)
    for _ in range(1 + 2 * (SETTINGS.warmup + SETTINGS.samples) + 1):
        call(torch.ones(1))
    assert sides.calls[0] == COMPILED  # the compiled graph's trial call
    assert floor.choice == EAGER
    assert call(torch.ones(1)) == EAGER


def test_no_call_is_timed_while_a_background_compile_runs() -> None:
    # Note [No floor while compiling in the background]
    timer = ScriptedTimer(compiled_ms=10.0, eager_ms=1.0)
    floor = EagerFloor("g", None, SETTINGS, timer)
    sides = ScriptedSides(timer)
    compiling = [True]
    call = UserGraphFloorCall(sides.compiled, sides.user_graph, floor, lambda: compiling[0])
    for _ in range(30):
        call(torch.ones(1))
    assert sides.calls == [COMPILED] * 30 and floor.choice is None
    assert floor.describe() == "eager floor: measuring (0 of 3 eager calls timed)"
    compiling[0] = False
    for _ in range(2 * (SETTINGS.warmup + SETTINGS.samples) + 1):
        call(torch.ones(1))
    assert floor.choice == EAGER


def _compiled(*args: Any) -> None:
    return None


def _on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import mybackend.compiled as compiled_module

    monkeypatch.setattr(compiled_module, "runs_on_cuda", lambda inputs: True)


def test_only_graphs_on_cuda_get_a_floor() -> None:
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    weight = torch.nn.Parameter(torch.ones(2))
    assert is_training_graph([weight])
    with torch.no_grad():
        assert not is_training_graph([weight])
    assert not is_training_graph([torch.ones(2)])
    # On the CPU mybackend runs ATen: nothing to time.
    assert with_user_graph_floor(_compiled, gm, [weight], Options()) is _compiled
    with torch.no_grad():
        assert with_user_graph_floor(_compiled, gm, [weight], Options()) is _compiled


def test_inference_and_training_graphs_are_timed_against_the_users_graph(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _on_cuda(monkeypatch)
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    weight = torch.nn.Parameter(torch.ones(2))
    options = Options.from_user(None, {"kernel_cache_dir": str(tmp_path)})
    records = [GraphRecord("graph0.forward", "forward", "", None, [])]
    step = with_user_graph_floor(_compiled, gm, [weight], options, records)
    with torch.no_grad():
        inference = with_user_graph_floor(_compiled, gm, [weight], options)
    assert isinstance(step, UserGraphFloorCall) and isinstance(inference, UserGraphFloorCall)
    assert isinstance(step.floor._timer, StepTimer)  # forward and backward
    assert type(inference.floor._timer) is CudaCallTimer  # the call alone
    assert step._user_graph == gm.forward and inference._user_graph == gm.forward
    assert records[0].floor is step.floor  # explain() shows it with the graph
    assert "training step" in step.floor.name and "inference" in inference.floor.name
    # One dynamo graph, two programs: their choices are kept apart.
    assert step.floor._cache_file != inference.floor._cache_file
    assert Options.from_user(None, {"eager_floor": False}).eager_floor is False
    off = Options.from_user(None, {"eager_floor": False, "kernel_cache_dir": str(tmp_path)})
    assert with_user_graph_floor(_compiled, gm, [weight], off) is _compiled


def test_no_floor_while_one_of_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [No floor across collectives]: a rank's step waits for the others.
    _on_cuda(monkeypatch)
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    weight = torch.nn.Parameter(torch.ones(2))
    options = Options.from_user(None, {"kernel_cache_dir": "off"})
    assert isinstance(with_user_graph_floor(_compiled, gm, [weight], options), UserGraphFloorCall)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *args: 2)
    assert with_user_graph_floor(_compiled, gm, [weight], options) is _compiled
    with torch.no_grad():
        assert with_user_graph_floor(_compiled, gm, [weight], options) is _compiled


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm-start"])
def test_a_later_compile_of_the_graph_finds_its_choice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, warm: bool
) -> None:
    # Note [Warm-started floors]: the floor keys by dynamo's graph, which a
    # later process (dynamo reset here) traces again, warm-started or not.
    _on_cuda(monkeypatch)
    options = {"kernel_cache_dir": str(tmp_path), "warm_start": warm}
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU()).eval()
    x = torch.randn(2, 4)
    floors = []
    for _ in range(2):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="mybackend", options=options)
        with torch.no_grad():
            _, records = compiled_records(functools.partial(compiled, x))  # untimed trial
        (floor,) = {id(r.floor): r.floor for r in records if r.floor is not None}.values()
        floors.append(floor)
        if len(floors) == 1:  # what the first process chose
            floor._settle(EAGER, 2.0, 1.0)
            floor._save()
    assert floors[1].from_cache and floors[1].choice == EAGER
    assert floors[1]._cache_file == floors[0]._cache_file
