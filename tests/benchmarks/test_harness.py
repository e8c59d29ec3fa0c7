"""Unit tests of the benchmark harness (benchmarks/), on the CPU.

They check that the harness tells a wrong backend from a right one and a slow
one from a fast one, that its tables and JSON are what they should be, and
that the quick CLI runs end to end in a fresh process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bench_fake_backends as fake
import pytest
import torch

from benchmarks.backends import REGISTRY, resolve
from benchmarks.common import check_accuracy, quantile, time_calls
from benchmarks.micro.roofline import Ceilings, floor, roofline_fraction
from benchmarks.models import MODELS
from benchmarks.report import FAILED_MARK, TIMES, markdown_table, render, speedup_table
from benchmarks.results import Result, Run
from benchmarks.runner import Settings, measure_backend, measure_row
from benchmarks.scenarios import Task, Workload
from tests.testing import HANG_GUARD_S

REPO_ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
FAST = Settings(repeats=3, warmup=1, target_ms=5.0, warm_compile=False)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread, as --quick uses: with two, a busy second core (a
    compiler running beside the tests) stalls every parallel op for a time slice."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def mlp_task() -> Task:
    return Task(Workload("mlp", "inference", 4))


# --- timing ------------------------------------------------------------------


def test_time_calls_measures_a_sleep() -> None:
    timing = time_calls(lambda: time.sleep(0.005), CPU, repeats=5, warmup=1, target_ms=10)
    assert timing.median_ms >= 4.5  # a sleep lasts at least its time; no upper bound (a busy CI)
    assert timing.min_ms <= timing.p25_ms <= timing.median_ms <= timing.p75_ms <= timing.max_ms
    assert timing.repeats == 5 and timing.iters >= 1


def test_quantile_interpolates() -> None:
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0


def test_slow_backend_is_slower_than_eager() -> None:
    results = measure_row(
        Workload("mlp", "inference", 4), [resolve("eager"), resolve(fake.sleepy)], FAST
    )
    eager, slow = results
    assert eager.status == slow.status == "ok", (eager.error, slow.error)
    assert slow.median_ms >= fake.SLEEP_S * 1e3
    assert slow.speedup is not None and slow.speedup < 1.0
    assert eager.speedup == pytest.approx(1.0)


def test_warm_compile_backends_limits_the_fresh_process_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import benchmarks.runner as runner

    measured: list[str] = []

    def fake_warm_first_call(workload: Workload, backend: object, settings: Settings) -> float:
        measured.append(backend.name)  # type: ignore[attr-defined]
        return 1.0

    monkeypatch.setattr(runner, "warm_first_call", fake_warm_first_call)
    backends = [resolve("eager"), resolve("aot-eager"), resolve("dynamo-eager")]
    settings = Settings(
        repeats=2, warmup=1, target_ms=2.0, warm_compile=True,
        warm_compile_backends=frozenset({"aot-eager"}),
    )  # fmt: skip
    results = measure_row(Workload("mlp", "inference", 4, tiny=True), backends, settings)
    assert measured == ["aot-eager"]
    by_name = {r.backend: r for r in results}
    assert by_name["aot-eager"].warm_first_call_s == 1.0
    assert by_name["dynamo-eager"].warm_first_call_s is None


# --- accuracy ----------------------------------------------------------------


def test_wrong_backend_is_inaccurate(mlp_task: Task) -> None:
    result = measure_backend(mlp_task, resolve(fake.add_one), FAST)
    assert result.status == "ok", result.error
    assert result.accurate is False
    assert result.cosine is not None and result.cosine < 0.99
    assert result.graphs == 1 and result.graph_breaks == 0 and result.recompiles == 0


def test_right_backend_is_accurate(mlp_task: Task) -> None:
    result = measure_backend(mlp_task, resolve(fake.passthrough), FAST)
    assert result.status == "ok", result.error
    assert result.accurate is True, result.accuracy_note
    assert result.cosine == pytest.approx(1.0, abs=1e-6)
    assert result.rel_error is not None and result.rel_error < 1e-5


def test_compile_warnings_are_recorded(mlp_task: Task) -> None:
    result = measure_backend(mlp_task, resolve(fake.warns), FAST)
    assert result.status == "ok" and result.accurate, result.error
    assert any("falling back to eager" in w for w in result.warnings)
    assert "falling back to eager" in render(Run(results=[result]))


def test_wrong_training_backend_is_inaccurate() -> None:
    task = Task(Workload("mlp", "training", 4))
    assert measure_backend(task, resolve(fake.add_one), FAST).accurate is False
    assert measure_backend(task, resolve("aot-eager"), FAST).accurate is True


def test_check_accuracy_verdicts() -> None:
    torch.manual_seed(0)
    ref = [torch.randn(64, 64, dtype=torch.float64)]
    eager = [ref[0].float()]
    assert check_accuracy([eager[0].clone()], eager, ref, tol=1e-4).passed
    assert not check_accuracy([eager[0] + 1.0], eager, ref, tol=1e-4).passed
    nan = eager[0].clone()
    nan[0, 0] = math.nan
    assert not check_accuracy([nan], eager, ref, tol=1e-4).passed
    assert not check_accuracy([], eager, ref, tol=1e-4).passed


# --- tables and JSON ----------------------------------------------------------


def _result(
    backend: str,
    batch: int,
    median: float,
    speedup: float | None = None,
    accurate: bool | None = True,
) -> Result:
    return Result(
        "mlp",
        "inference",
        batch,
        backend,
        median_ms=median,
        speedup=speedup,
        accurate=accurate,
        first_call_s=1.5,
    )


def test_markdown_table_format() -> None:
    table = markdown_table(["a", "b"], [["1", "x|y"], ["2", ""]])
    assert table == "| a | b |\n|---|---|\n| 1 | x\\|y |\n| 2 |  |"


def test_speedup_table_format() -> None:
    results = [
        _result("eager", 1, 2.0, 1.0),
        _result("inductor", 1, 1.0, 2.0),
        _result("eager", 32, 4.0, 1.0),
        _result("inductor", 32, 0.5, 8.0, accurate=False),
    ]
    assert speedup_table(results, "inference") == "\n".join(
        [
            "| model | batch | eager ms | inductor |",
            "|---|---|---|---|",
            f"| mlp | 1 | 2.00 | 2.00{TIMES} |",
            f"| mlp | 32 | 4.00 | 8.00{TIMES} {FAILED_MARK} |",
            f"| geometric mean |  |  | 4.00{TIMES} |",
        ]
    )


def test_json_round_trip(tmp_path: Path) -> None:
    run = Run(
        meta={"device": "cpu", "quick": True},
        ceilings={"copy_tbps": 3.0},
        results=[
            _result("eager", 1, 2.0, 1.0),
            Result("gpt2", "training", 8, "x", status="error", error="boom"),
        ],
    )
    assert Run.from_json(run.to_json()) == run
    run.save(tmp_path / "results.json")
    assert Run.load(tmp_path / "results.json") == run
    json.loads((tmp_path / "results.json").read_text())  # plain JSON
    newer = Run(results=[_result("eager", 1, 3.0, 1.0)])
    merged = run.merged(newer)
    assert len(merged.results) == 2 and merged.results[0].median_ms == 3.0


# --- registries and the roofline -----------------------------------------------


def test_backend_registry() -> None:
    assert REGISTRY["inductor-reduce-overhead"] == dict(backend="inductor", mode="reduce-overhead")
    assert REGISTRY["mybackend-reduce-overhead"] == dict(
        backend="mybackend", mode="reduce-overhead"
    )
    # torch.compile refuses a mode together with options.
    assert not [n for n, kwargs in REGISTRY.items() if {"mode", "options"} <= set(kwargs or {})]
    assert resolve("eager").is_eager
    spec = resolve("bench_fake_backends:add_one")
    assert spec.compile_kwargs == {"backend": fake.add_one} and spec.spec is not None
    with pytest.raises(ValueError, match="choose from"):
        resolve("no-such-backend")


def test_unregistered_backend_is_unavailable() -> None:
    backend = resolve("bench_fake_backends:add_one")
    assert backend.unavailable_reason() is None
    from benchmarks.backends import Backend

    ghost = Backend("ghost", {"backend": "no_such_backend_xyz"}, None)
    assert "no_such_backend_xyz" in (ghost.unavailable_reason() or "")


def test_roofline_floor() -> None:
    ceilings = Ceilings(copy_tbps=2.0, matmul_tflops=500.0)
    mem = floor(2e9, 1e9, ceilings)  # 1 ms of bytes, 0.002 ms of flops
    assert mem.ms == pytest.approx(1.0) and mem.bound == "memory"
    comp = floor(1e6, 1e12, ceilings)  # 2 ms of flops
    assert comp.ms == pytest.approx(2.0) and comp.bound == "compute"
    assert roofline_fraction(4.0, 2e9, 1e9, ceilings) == pytest.approx(0.25)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_models_build_and_run(name: str) -> None:
    spec = MODELS[name]
    inputs = spec.make_inputs(2, True, torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = spec.build(True).eval()(*inputs)
    assert isinstance(out, torch.Tensor) and out.shape[0] == 2


# --- the CLI, end to end --------------------------------------------------------


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), str(Path(__file__).parent), env.get("PYTHONPATH")])
    )
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def test_quick_cli_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _cli(
        [
            "--quick",
            "--models",
            "mlp",
            "--backends",
            "eager,bench_fake_backends:passthrough",
            "--warm-compile",
            "--repeats",
            "3",
            "--out",
            str(out),
            "--no-progress",
        ],
        REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = Run.load(out / "results.json")
    assert {(r.scenario, r.batch) for r in run.results} == {
        ("inference", 1),
        ("inference", 32),
        ("training", 8),
    }
    compiled = [r for r in run.results if r.backend == "passthrough"]
    assert all(r.status == "ok" and r.accurate for r in compiled), compiled
    assert all(r.warm_first_call_s is not None for r in compiled)
    assert all(r.peak_mib is None for r in run.results)  # CPU
    assert (out / "results.md").read_text().startswith("# Benchmark results")
    assert proc.stdout.rstrip().endswith("|")  # the table is printed last
    assert "geometric mean" in proc.stdout
    pytest.importorskip("matplotlib")
    assert (out / "speedup.png").stat().st_size > 0
    assert (out / "compile_time.png").stat().st_size > 0


def test_isolate_marks_a_crashing_backend(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _cli(
        [
            "--quick",
            "--models",
            "mlp",
            "--scenarios",
            "inference",
            "--batch",
            "1",
            "--backends",
            "eager,bench_fake_backends:crash",
            "--isolate",
            "--strict",
            "--repeats",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ],
        REPO_ROOT,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    by_backend = {r.backend: r for r in Run.load(out / "results.json").results}
    assert by_backend["eager"].status == "ok"
    assert by_backend["crash"].status == "crashed"


def test_partition_scale_benchmark_runs_on_a_small_graph() -> None:
    from benchmarks.micro.partition import time_partition

    seconds, partitions = time_partition(nodes=500, graphs=1, window=0)
    assert seconds > 0 and partitions >= 1
