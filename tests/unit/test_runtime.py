"""Stage 9: the executor, through _C.compile on lowered graphs."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower


def _compile(fn, *inputs, mode: str = "fake", options=None):  # type: ignore[no-untyped-def]
    lowered = lower(make_fx(fn, tracing_mode=mode)(*inputs), [])
    return _C.compile(lowered.graph, options or {}, lowered.run_python_node)


def test_multiple_outputs_and_scalars() -> None:
    def fn(x: torch.Tensor):  # type: ignore[no-untyped-def]
        return x.sin(), x.cos().sum(), x.amax(dim=0)

    x = torch.randn(4, 3)
    got = _compile(fn, x).run([x])
    for g, e in zip(got, fn(x), strict=True):
        torch.testing.assert_close(g, e)


def test_outputs_that_alias_inputs_are_views() -> None:
    core = _compile(lambda x: (x.view(-1), x.t()), torch.randn(2, 3))
    x = torch.randn(2, 3)
    flat, transposed = core.run([x])
    assert flat.data_ptr() == x.data_ptr() and transposed.data_ptr() == x.data_ptr()
    x.add_(1)
    torch.testing.assert_close(flat, x.view(-1))


def test_in_place_mutation_of_inputs() -> None:
    def fn(buffer: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        buffer.mul_(0.9).add_(x, alpha=0.1)  # a running-statistics style update
        return x * 2

    buffer, x = torch.randn(5), torch.randn(5)
    expected_buffer = buffer * 0.9 + x * 0.1
    core = _compile(fn, buffer.clone(), x)
    out = core.run([buffer, x])[0]
    torch.testing.assert_close(buffer, expected_buffer)
    torch.testing.assert_close(out, x * 2)


def test_partitions_run_in_the_core_and_fallback_nodes_through_dispatcher() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.exp(x) * 2
        z = torch.cumsum(y, 0)  # not in the capability registry
        return torch.relu(z) + 1

    core = _compile(fn, torch.randn(6))
    x = torch.randn(6)
    torch.testing.assert_close(core.run([x])[0], fn(x))
    stats = core.stats()
    assert stats["nodes_run_in_partitions"] == 4
    assert stats["nodes_run_as_aten_fallback"] == 1
    report = core.report()
    cumsum = next(n for n in report["nodes"] if n["op"] == "aten::cumsum.default")
    assert cumsum["partition"] == -1
    assert "not in the capability registry" in cumsum["reason"]
    assert [s for s, _ in report["stage_times"]] == [
        "verify",
        "capability",
        "partition",
        "fusion",
        "codegen",
        "runtime",
    ]


def test_disabled_ops_option() -> None:
    core = _compile(
        lambda x: torch.exp(x) * 2, torch.randn(3), options={"disabled_ops": ["aten::mul.Tensor"]}
    )
    mul = next(n for n in core.report()["nodes"] if n["op"] == "aten::mul.Tensor")
    assert not mul["supported"] and "disabled by option disabled_ops" in mul["reason"]


def test_symbolic_sizes_are_bound_and_checked() -> None:
    core = _compile(lambda x, y: x + y, torch.randn(4, 3), torch.randn(4, 3), mode="symbolic")
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    torch.testing.assert_close(core.run([x, y])[0], x + y)
    with pytest.raises(_C.Error, match="inputs disagree on a dynamic size"):
        core.run([torch.randn(6, 3), torch.randn(5, 3)])


def test_wrong_number_of_inputs_is_a_clear_error() -> None:
    core = _compile(lambda x: x + 1, torch.randn(2))
    with pytest.raises(_C.Error, match="takes 1 inputs, but 2 were given"):
        core.run([torch.randn(2), torch.randn(2)])


def test_unknown_core_option() -> None:
    lowered = lower(make_fx(lambda x: x + 1)(torch.randn(2)), [])
    with pytest.raises(_C.Error, match="unknown core option 'colour'"):
        _C.compile(lowered.graph, {"colour": 1})


def test_cuda_graphs_stay_off_for_cpu_graphs_and_say_why() -> None:
    core = _compile(lambda x: x + 1, torch.randn(2), options={"cuda_graphs": True})
    status = core.report()["cuda_graphs"]
    assert status.startswith("off"), status
    assert "not on a CUDA device" in status or "built without CUDA" in status
    assert core.run([torch.ones(2)])[0].tolist() == [2.0, 2.0]
    assert core.stats()["cuda_graph_captures"] == 0


def test_views_inside_the_graph_are_made_without_the_dispatcher_from_the_second_call() -> None:
    # Note [Views replayed without the dispatcher]
    def fn(x: torch.Tensor):  # type: ignore[no-untyped-def]
        heads = x.view(2, 3, 4).permute(0, 2, 1)
        first, second = heads.split(2, dim=1)
        return (first * 2).sum(), second.exp()

    core = _compile(fn, torch.randn(24))
    replayed = []
    for _ in range(3):
        x = torch.randn(24)
        for got, expected in zip(core.run([x]), fn(x), strict=True):
            torch.testing.assert_close(got, expected)
        replayed.append(core.stats()["views_replayed"])
    assert replayed[0] == 0  # the first call is boxed and remembered
    assert replayed[1] >= 3 and replayed[2] == 2 * replayed[1], replayed
    # A base of another layout takes the boxed call again, with the right result.
    x = torch.randn(48)[::2]
    for got, expected in zip(core.run([x]), fn(x.contiguous()), strict=True):
        torch.testing.assert_close(got, expected)


def test_the_view_replay_kill_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYBACKEND_VIEW_REPLAY", "0")
    core = _compile(lambda x: x.t() * 2, torch.randn(3, 4))
    for _ in range(3):
        x = torch.randn(3, 4)
        torch.testing.assert_close(core.run([x])[0], x.t() * 2)
    assert core.stats()["views_replayed"] == 0


def test_views_of_a_dynamic_shape_graph_are_replayed_per_size() -> None:
    # Note [Views replayed without the dispatcher]: symbolic sizes are matched too.
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0] // 4, 4).t() * 2

    core = _compile(fn, torch.randn(24), mode="symbolic")
    counts = []
    for n in (24, 24, 40, 40, 24):
        x = torch.randn(n)
        torch.testing.assert_close(core.run([x])[0], fn(x))
        counts.append(core.stats()["views_replayed"])
    steps = [b - a for a, b in zip([0, *counts[:-1]], counts, strict=True)]
    assert steps[0] == 0 and steps[2] == 0, steps  # a size's first call is boxed
    assert steps[1] == steps[3] == steps[4] > 0, steps


def test_host_times_by_step_label(monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [Host time by step]: every step's clock lands under its operator or
    # engine kind, inside its run, inside its call from Python.
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x.t() * 2).sum(0)

    assert _compile(fn, torch.randn(3, 4)).host_times() == []  # off by default
    monkeypatch.setenv("MYBACKEND_HOST_TIMES", "1")
    core = _compile(fn, torch.randn(3, 4))
    assert core.host_times() == []  # nothing ran yet
    for _ in range(3):
        core.run([torch.randn(3, 4)])
    core.run_boxed([torch.randn(3, 4)])
    rows = {label: (calls, us) for label, calls, us in core.host_times()}
    labels = [label for label, _, _ in core.host_times()]
    assert labels[:2] == ["call from Python (run included)", "run (whole graph)"], labels
    assert rows["call from Python (run included)"][0] == 4
    assert rows["run (whole graph)"][0] == 4
    for op in ("aten::t.default", "aten::mul.Tensor", "aten::sum.dim_IntList"):
        assert rows[op][0] == 4, (op, rows)
    steps_us = sum(us for label, (_, us) in rows.items() if label.startswith("aten::"))
    assert (
        0 < steps_us <= rows["run (whole graph)"][1] <= rows["call from Python (run included)"][1]
    )


def test_host_times_of_a_training_step_through_torch_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Note [Host time by step]: both graphs of a training step, read from their
    # records and summed per label the way benchmarks.profile --host-split does.
    from mybackend.reports import collecting, graph_host_times, host_times_by_label

    monkeypatch.setenv("MYBACKEND_HOST_TIMES", "1")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    torch._dynamo.reset()
    with collecting() as records:
        for _ in range(3):
            compiled(torch.randn(4, 8)).sum().backward()
    assert sorted(r.kind for r in records) == ["backward", "forward"]
    for record in records:
        rows = {label: calls for label, calls, _ in graph_host_times(record)}
        assert rows["run (whole graph)"] == 3, (record.kind, rows)
    totals = host_times_by_label(records)
    assert totals["call from Python (run included)"][0] == 6
    assert totals["aten::gelu.default"][0] == 3  # the forward's, once a step
