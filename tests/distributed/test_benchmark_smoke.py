"""benchmarks/distributed.py under torchrun on the CPU (gloo, two processes,
the tiny GPT-2): every setup (a model per rank, DDP, FSDP2) runs with eager
and mybackend, the table is printed, and mybackend's losses pass the check
against eager's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from benchmarks.distributed import (
    Result,
    check_losses,
    round_order,
    speedup_kept,
    thread_cpu_seconds,
    window_means,
)
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
    assert "CPU ms per step by thread, ddp mybackend, rank 0" in result.stdout


def test_ddp_options_reach_distributed_data_parallel(tmp_path: Path) -> None:
    """--ddp-options: more DDP arguments (here gradients as views of DDP's
    buckets), shown in the table's heading; the losses still match."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(ROOT / "benchmarks" / "distributed.py"), "--device", "cpu", "--tiny",
        "--setups", "ddp", "--backends", "eager,mybackend", "--warmup", "1", "--steps", "2",
        "--rounds", "1", "--ddp-options", '{"gradient_as_bucket_view": true}',
        "--out", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    table = (tmp_path / "results.md").read_text()
    assert 'ddp options: {"gradient_as_bucket_view": true}' in table
    row = next(line for line in table.splitlines() if line.startswith("| ddp | mybackend |"))
    assert "| ok |" in row, row


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


# Rank 1 fails, rank 0 does not; both must learn it from the same collective.
ONE_RANK_FAILS = """
import torch.distributed as dist
from benchmarks.distributed import on_every_rank

dist.init_process_group("gloo")
rank = dist.get_rank()


def action():
    if rank == 1:
        raise ValueError("rank one's failure")


failed = on_every_rank(action, "case", rank, "cpu")
passed = on_every_rank(lambda: None, "next case", rank, "cpu")
print(f"rank {rank}: failed={failed.strip().splitlines()[-1]!r} passed={passed!r}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_failure_on_one_rank_fails_the_step_on_every_rank(tmp_path: Path) -> None:
    """Both ranks report the failure and reach the next collective together
    (the rank that raised prints its own traceback)."""
    script = tmp_path / "one_rank_fails.py"
    script.write_text(ONE_RANK_FAILS)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(script),
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "rank 0: failed='failed on another rank' passed=None" in result.stdout
    assert 'rank 1: failed="ValueError: rank one\'s failure" passed=None' in result.stdout
    assert "[rank 1] case failed:" in result.stdout
    assert "[rank 0] case failed:" not in result.stdout


def _checked(losses: list[float], eager_losses: list[float]) -> Result:
    result = Result("fsdp2-mp", "mybackend", losses=losses)
    check_losses(result, Result("fsdp2-mp", "eager", losses=eager_losses), rtol=2e-2)
    return result


def test_the_loss_check_compares_curves_not_steps() -> None:
    """Note [Loss curves, not steps]: one step's spike in eager's curve is
    reported but passes; an offset of every step fails."""
    curve = [11.0 - 0.005 * step for step in range(70)]
    assert window_means(curve[:25]) == pytest.approx([10.9775, 10.9275, 10.89])
    spiked = list(curve)
    spiked[65] += 0.5  # eager's one-step spike, as measured on two H200s
    spike = _checked(curve, spiked)
    assert spike.loss_ok is True
    assert spike.max_loss_rel_diff == pytest.approx(0.5 / spiked[65])
    assert spike.max_window_rel_diff == pytest.approx(0.05 / (sum(spiked[60:70]) / 10))
    offset = _checked([loss * 1.03 for loss in curve], curve)  # a systematic 3%
    assert offset.loss_ok is False
    assert offset.max_window_rel_diff == pytest.approx(0.03)
    untrained = _checked([curve[0]] * 70, curve)  # no learning: the curve stays flat
    assert untrained.loss_ok is False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_thread_cpu_seconds_sees_a_busy_thread() -> None:
    """A live thread's CPU time shows in the per-thread sums (a thread that
    ended takes its time with it: the threads the benchmark watches live as
    long as the process). The work is fixed, about half a second of CPU on
    the development machine; the check asks for a tenth of that."""
    before = thread_cpu_seconds()
    spun, release = threading.Event(), threading.Event()

    def spin() -> None:
        total = 0
        for value in range(8_000_000):
            total += value * value
        assert total > 0
        spun.set()
        release.wait()

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(timeout=HANG_GUARD_S)
        used = thread_cpu_seconds()
    finally:
        release.set()
        worker.join()
    new_threads = {name: seconds for name, seconds in used.items() if name not in before}
    assert sum(new_threads.values()) >= 0.05, used
    assert all(seconds >= 0 for seconds in used.values())
