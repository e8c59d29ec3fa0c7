"""benchmarks.compile_breakdown: the first call split by stage, as a table."""

from __future__ import annotations

import pytest

from benchmarks.compile_breakdown import Measured, first_calls, main, table


def test_table_has_a_row_per_stage_and_the_totals() -> None:
    kernels = {"compiles": 12, "disk_hits": 3, "compile_us": 4_500_000, "batch_wall_us": 750_000}
    columns = {
        "m a": Measured(
            {"dynamo (bytecode tracing, guards)": 1.0, "rest of the call": 0.5}, 1.25, kernels
        ),
        "m b": Measured({"rest of the call": 2.0}, 1.75, {}, {}, 0.25),
    }
    lines = table(columns).splitlines()
    assert lines[0] == "| stage (s) | m a | m b |"
    assert "| dynamo (bytecode tracing, guards) | 1.00 | - |" in lines
    assert "| first call | **1.50** | **2.00** |" in lines
    assert "| first call, CPU time of the process | 1.25 | 1.75 |" in lines
    assert "| second call (the run alone) | 0.00 | 0.25 |" in lines
    assert "| first call less the second | 1.50 | 1.75 |" in lines
    assert "| generated kernels: NVRTC compiles / disk hits | 12 / 3 | 0 / 0 |" in lines
    assert "| generated kernels: NVRTC time summed over threads | 4.50 | 0.00 |" in lines
    assert lines[-1] == "| generated kernels: wall time of compile batches | 0.75 | 0.00 |"


def test_each_measured_cell_is_printed_in_one_line() -> None:
    # What a run stopped before its table (the device call's limit) still leaves.
    cold = Measured({"dynamo (bytecode tracing, guards)": 2.0, "rest of the call": 5.5}, 1.0, {})
    warm = Measured({"dynamo (bytecode tracing, guards)": 2.0, "rest of the call": 0.75}, 1.0, {})
    line = first_calls({"gpt2 m cold": cold, "gpt2 m warm": warm})
    assert line == (
        "gpt2 m cold first call 7.50 s, dynamo 2.00 s; gpt2 m warm first call 2.75 s, dynamo 2.00 s"
    )


def test_tiny_training_row_reports_mybackend_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--models", "mlp", "--tiny", "--backends", "mybackend", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "measured mlp mybackend: mlp mybackend first call" in captured.err
    for stage in (
        "dynamo",
        "aot_autograd joint trace",
        "aot_autograd partition",
        "mybackend lowering",
    ):
        assert f"| {stage}" in out, out


def test_table_lists_the_compile_counters() -> None:
    columns = {
        "m cold": Measured({"rest of the call": 1.0}, 1.0, {}, {"graphs lowered": 2}),
        "m warm": Measured({"rest of the call": 0.5}, 0.5, {}, {"warm start: graphs loaded": 2}),
    }
    lines = table(columns).splitlines()
    assert "| mybackend: graphs lowered | 2 | 0 |" in lines
    assert "| mybackend: warm start: graphs loaded | 0 | 2 |" in lines


def test_warm_processes_start_from_the_cold_process_caches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--warm: the second process loads what the first saved (option
    warm_start), so it traces and lowers nothing (issue 35)."""
    argv = ["--models", "mlp", "--tiny", "--backends", "mybackend-warm-start", "--device", "cpu"]
    assert main([*argv, "--processes", "1", "--warm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = "mlp mybackend-warm-start"
    assert lines[0] == f"| stage (s) | {row} cold | {row} warm |"
    assert "| mybackend: warm start: graphs serialized | 2 | 0 |" in lines, lines
    assert "| mybackend: warm start: graphs loaded | 0 | 2 |" in lines, lines
    assert "| mybackend: graphs lowered | 2 | 0 |" in lines, lines
    joint = next(line for line in lines if line.startswith("| aot_autograd joint trace"))
    assert joint.endswith("| - |"), joint  # the warm process traced no joint graph


def test_warm_needs_fresh_processes() -> None:
    with pytest.raises(SystemExit):
        main(["--models", "mlp", "--tiny", "--device", "cpu", "--warm"])
