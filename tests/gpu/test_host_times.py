"""GPU-marked: host time by step (Note [Host time by step]) on a CUDA training
step: every engine the step runs has its row, counted once per run, inside
the runs, inside the calls from Python."""

from __future__ import annotations

import pytest
import torch

from mybackend.reports import collecting, host_times_by_label

pytestmark = pytest.mark.gpu


def test_engine_kinds_are_timed_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYBACKEND_HOST_TIMES", "1")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.LayerNorm(256), torch.nn.GELU(), torch.nn.Linear(256, 8)
    ).cuda()
    # No eager floor: it would run some steps as the user graph while it chooses.
    options = {"strict": True, "eager_floor": False}
    compiled = torch.compile(model, backend="mybackend", options=options)
    torch._dynamo.reset()
    steps = 4
    with collecting() as records:
        for _ in range(steps):
            compiled(torch.randn(32, 64, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    assert sorted(r.kind for r in records) == ["backward", "forward"]
    totals = host_times_by_label(records)
    assert totals["run (whole graph)"][0] == 2 * steps
    assert totals["call from Python (run included)"][0] == 2 * steps
    for engine in ("mybackend::matmul", "mybackend::norm"):
        calls, us = totals[engine]
        assert calls > 0 and calls % steps == 0 and us > 0, (engine, totals)
    inside = sum(
        us for label, (_, us) in totals.items() if label.startswith(("mybackend::", "aten"))
    )
    assert inside <= totals["run (whole graph)"][1] <= totals["call from Python (run included)"][1]
