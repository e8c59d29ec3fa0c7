"""benchmarks.compile_breakdown: the first call split by stage, as a table."""

from __future__ import annotations

import pytest

from benchmarks.compile_breakdown import Measured, main, table


def test_table_has_a_row_per_stage_and_the_totals() -> None:
    kernels = {"compiles": 12, "disk_hits": 3, "compile_us": 4_500_000, "batch_wall_us": 750_000}
    columns = {
        "m a": Measured(
            {"dynamo (bytecode tracing, guards)": 1.0, "rest of the call": 0.5}, 1.25, kernels
        ),
        "m b": Measured({"rest of the call": 2.0}, 1.75, {}),
    }
    lines = table(columns).splitlines()
    assert lines[0] == "| stage (s) | m a | m b |"
    assert "| dynamo (bytecode tracing, guards) | 1.00 | - |" in lines
    assert "| first call | **1.50** | **2.00** |" in lines
    assert "| first call, CPU time of the process | 1.25 | 1.75 |" in lines
    assert "| generated kernels: NVRTC compiles / disk hits | 12 / 3 | 0 / 0 |" in lines
    assert "| generated kernels: NVRTC time summed over threads | 4.50 | 0.00 |" in lines
    assert lines[-1] == "| generated kernels: wall time of compile batches | 0.75 | 0.00 |"


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
