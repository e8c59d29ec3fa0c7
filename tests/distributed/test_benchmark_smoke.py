"""benchmarks/distributed.py under torchrun on the CPU (gloo, two processes,
the tiny GPT-2): every setup (a model per rank, DDP, FSDP2) runs with eager
and mybackend, the table is printed, and mybackend's losses pass the check
against eager's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.distributed import Result, round_order, speedup_kept
from tests.testing import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]


def test_distributed_benchmark_runs_on_cpu(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(ROOT / "benchmarks" / "distributed.py"), "--device", "cpu", "--tiny",
        "--backends", "eager,mybackend", "--warmup", "1", "--steps", "2", "--rounds", "2",
        "--out", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    rows = [line for line in (tmp_path / "results.md").read_text().splitlines() if "|" in line]
    for setup in ("single", "ddp", "fsdp2", "fsdp2-mp"):
        eager, compiled = (f"| {setup} | {backend} |" for backend in ("eager", "mybackend"))
        assert any(row.startswith(eager) for row in rows), rows
        row = next(row for row in rows if row.startswith(compiled))
        assert "| ok |" in row, row
        assert row.endswith("| 0 |"), f"mybackend fell back to eager: {row}"
        low, high = (float(ms) for ms in row.split("|")[4].split("-"))  # the rounds' spread
        assert 0 < low <= float(row.split("|")[3]) <= high, row
    assert "| setup | backend | ms/step |" in result.stdout
    assert "Share of the single-GPU speedup each backend keeps under DDP" in result.stdout


def test_the_share_of_the_single_gpu_speedup_kept_under_ddp() -> None:
    """Issue 33's measure: (eager DDP / backend DDP) / (eager single / backend single)."""
    results = [
        Result("single", "eager", 30.0),
        Result("single", "mybackend", 15.0),
        Result("ddp", "eager", 40.0),
        Result("ddp", "mybackend", 25.0),
        Result("ddp", "inductor", 20.0),  # no single row: left out
        Result("fsdp2", "mybackend", 10.0),
    ]
    assert speedup_kept(results) == {"mybackend": 0.8}
    failed = Result("ddp", "mybackend", error="Traceback ...")
    assert speedup_kept([*results[:3], failed]) == {}


def test_each_round_starts_one_backend_further() -> None:
    backends = ["eager", "inductor", "mybackend"]
    assert round_order(backends, 0) == backends
    assert round_order(backends, 1) == ["inductor", "mybackend", "eager"]
    assert round_order(backends, 2) == ["mybackend", "eager", "inductor"]
    assert round_order(backends, 3) == backends
