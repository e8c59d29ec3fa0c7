"""benchmarks.compile_breakdown: the first call split by stage, as a table."""

from __future__ import annotations

import pytest

from benchmarks.compile_breakdown import main, table


def test_table_has_a_row_per_stage_and_the_totals() -> None:
    columns = {
        "m a": ({"dynamo (bytecode tracing, guards)": 1.0, "rest of the call": 0.5}, 1.25),
        "m b": ({"rest of the call": 2.0}, 1.75),
    }
    lines = table(columns).splitlines()
    assert lines[0] == "| stage (s) | m a | m b |"
    assert "| dynamo (bytecode tracing, guards) | 1.00 | - |" in lines
    assert "| first call | **1.50** | **2.00** |" in lines
    assert lines[-1] == "| first call, CPU time of the process | 1.25 | 1.75 |"


def test_tiny_training_row_reports_mybackend_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--models", "mlp", "--tiny", "--backends", "mybackend", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for stage in (
        "dynamo",
        "aot_autograd joint trace",
        "aot_autograd partition",
        "mybackend lowering",
    ):
        assert f"| {stage}" in out, out
