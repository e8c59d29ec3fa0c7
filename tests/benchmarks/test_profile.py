"""benchmarks.profile's host-side measurements, on the CPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from benchmarks.profile import cpu_table, host_ms_per_step


def test_host_time_is_the_median_launch_time() -> None:
    delays = iter([0.001, 0.030, 0.004, 0.004, 0.004])
    ms = host_ms_per_step(lambda: time.sleep(next(delays)), 5)
    assert 4.0 <= ms < 20.0  # the median, not the 30 ms outlier nor the mean


def test_cpu_table_lists_the_ops_a_step_runs() -> None:
    a = torch.randn(64, 64)
    table = cpu_table(lambda: (a @ a).relu(), 2, 10)
    lines = [line for line in table.splitlines() if line.startswith("| aten::mm")]
    assert len(lines) == 1
    assert lines[0].split("|")[4].strip() == "1"  # calls per step


def test_benchmarks_warm_up_past_the_eager_floor() -> None:
    # Rows and profiles (which warm up as long, Settings().warmup) must see
    # the floor's choice, not its alternating trial calls: the trial call,
    # then warm-up and timed calls of each side.
    from benchmarks.runner import Settings
    from mybackend.eager_floor import FloorSettings

    floor = FloorSettings()
    assert Settings().warmup > 1 + 2 * (floor.warmup + floor.samples)


def test_cpu_table_splits_an_op_by_its_input_shapes() -> None:
    small, large = torch.randn(8, 8), torch.randn(64, 64)
    table = cpu_table(lambda: (small @ small, large @ large), 2, 10, shapes=True)
    rows = [line for line in table.splitlines() if line.startswith("| aten::mm")]
    assert len(rows) == 2, table
    assert {row.split("|")[5].strip() for row in rows} == {
        "[[8, 8], [8, 8]]",
        "[[64, 64], [64, 64]]",
    }


def test_shapes_brings_the_host_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # --shapes alone once profiled the GPU only (session 41's pythia run lost
    # its host table): it implies --host.
    import benchmarks.profile as profile

    seen: list[tuple[bool, bool, bool]] = []

    def fake_table(
        backend: str, task: object, steps: int, top: int, host: bool, shapes: bool, split: bool
    ) -> str:
        seen.append((host, shapes, split))
        return "table"

    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(profile, "kernel_table", fake_table)
    monkeypatch.setattr(profile, "reset_dynamo", lambda: None)
    monkeypatch.setattr(profile, "Task", lambda workload: workload)  # builds nothing on a GPU
    argv = ["--models", "resnet18", "--backends", "eager", "--shapes", "--out", str(tmp_path)]
    assert profile.main(argv) == 0
    assert seen == [(True, True, False)]
    assert profile.main([*argv, "--host-split"]) == 0
    assert seen[-1] == (True, True, True)


def test_host_split_table_is_per_step_and_counts_what_lies_outside_the_graphs() -> None:
    # Note [Host time by step]: only the timed steps count (the totals before
    # them are subtracted), per step, and the step's host time less the calls
    # from Python is what the step spent outside the compiled graphs.
    from benchmarks.profile import host_split_table

    boundary, run = "call from Python (run included)", "run (whole graph)"
    before = {boundary: (4, 4000.0), run: (4, 3000.0), "aten::mm": (8, 800.0)}
    after = {
        boundary: (8, 10000.0),
        run: (8, 8000.0),
        "aten::mm": (16, 2400.0),
        "mybackend::pointwise": (4, 1200.0),
        "aten::view.default": (0, 0.0),
    }
    text = host_split_table(before, after, steps=2, host_ms=5.0)
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ")]
    cells = {r[0].strip(): (r[1].strip(), r[2].strip()) for r in rows[1:]}
    assert [r[0].strip() for r in rows[1:4]] == ["outside the compiled graphs", boundary, run]
    assert cells["outside the compiled graphs"] == ("", "2000")  # 5000 us - 3000 us
    assert cells[boundary] == ("2", "3000") and cells[run] == ("2", "2500")
    assert cells["aten::mm"] == ("4", "800") and cells["mybackend::pointwise"] == ("2", "600")
    assert "aten::view.default" not in cells  # never ran in the timed steps
    assert "MYBACKEND_HOST_TIMES" in host_split_table({}, {}, steps=2, host_ms=1.0)


def test_generated_kernels_are_named_by_their_groups() -> None:
    # A profiled kernel (a split reduction's entry carries a suffix) maps to
    # its group's kind and operators through the core's report.
    from types import SimpleNamespace

    from mybackend.reports import kernel_group_of, kernel_groups

    report = {
        "nodes": [{"op": "aten::mul.Tensor"}, {"op": "aten::sum.dim_IntList"}, {"op": "aten::t"}],
        "kernels": [
            {
                "kind": "reduction",
                "kernel": "reduction: mb_reduction_41e89a713977eb98 + "
                "mb_reduction_343ac73975f9fbc6 (general) for sm_90 cubin",
                "nodes": [0, 1],
            },
            {"kind": "aten_sequence", "kernel": "", "nodes": [2]},
        ],
    }
    records = [
        SimpleNamespace(has_core_report=True, core_report=report),
        SimpleNamespace(has_core_report=False, core_report=None),  # fell back: no report
    ]
    groups = kernel_groups(records)  # type: ignore[arg-type]
    assert groups == {
        "mb_reduction_41e89a713977eb98": "reduction: mul.Tensor sum.dim_IntList",
        "mb_reduction_343ac73975f9fbc6": "reduction: mul.Tensor sum.dim_IntList",
    }
    group = "reduction: mul.Tensor sum.dim_IntList"
    assert kernel_group_of("mb_reduction_41e89a713977eb98_partials", groups) == group
    assert kernel_group_of("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", groups) == ""
    assert kernel_group_of("mb_pointwise_0000000000000000", groups) == ""
