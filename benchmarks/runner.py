"""Measuring backends on a workload: one process, every backend of a row.

``measure_row`` prepares the row once, measures each backend in turn
(``measure_backend``) with ``torch._dynamo.reset()`` and a memory reset in
between, fills in the speedups over eager, and finally measures the compile
time in a fresh process with a warm cache by running the CLI as a subprocess
(``warm_first_call``), one subprocess per compiled backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.backends import Backend
from benchmarks.common import (
    check_accuracy,
    dynamo_counts,
    free_memory,
    peak_memory_mib,
    reset_dynamo,
    time_calls,
    time_once,
)
from benchmarks.results import Result
from benchmarks.scenarios import Task, Workload

REPO_ROOT = Path(__file__).resolve().parent.parent
MAX_WARNINGS = 5  # distinct warning messages kept per result
# Warnings that say nothing about the backend under test.
IGNORED_WARNINGS = ("TensorFloat32 tensor cores for float32 matrix multiplication",)
FIRST_CALL_MARKER = "BENCH_FIRST_CALL "


@dataclasses.dataclass(frozen=True)
class Settings:
    """How long and how carefully to measure."""

    repeats: int = 10
    # Past mybackend's eager floor (Note [Eager is the floor]: its choice is
    # made by about the 18th call), so that every backend is timed settled.
    warmup: int = 20
    target_ms: float = 100.0
    check_calls: int = 2  # calls after the first, before the checked one
    warm_compile: bool = True
    # Backend names whose fresh-process first call is measured; None: all.
    # Each is one more process compiling the model, the longest part of a row.
    warm_compile_backends: frozenset[str] | None = None
    warm_timeout_s: float = 900.0
    quick: bool = False
    threads: int | None = None


def _base_result(workload: Workload, backend: Backend) -> Result:
    return Result(
        model=workload.model,
        scenario=workload.scenario,
        batch=workload.batch,
        backend=backend.name,
        device=workload.device,
        dtype=workload.dtype,
        tiny=workload.tiny,
    )


def measure_backend(task: Task, backend: Backend, settings: Settings) -> Result:
    """All in-process metrics of ``backend`` on ``task``; failures become a status."""
    result = _base_result(task.workload, backend)
    reason = backend.unavailable_reason()
    if reason is not None:
        result.status, result.error = "unavailable", reason
        return result
    device = task.device
    reset_dynamo()
    free_memory(device)
    try:
        _measure_into(result, task, backend, settings)
    except Exception as exc:  # a failing backend must not end the run
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"[:500]
    finally:
        reset_dynamo()
        free_memory(device)
    return result


def _forget_warn_once() -> None:
    """Lets mybackend's warn-once warnings (e.g. a fallback to eager) show again,
    so that each backend and row reports its own."""
    module = sys.modules.get("mybackend._logging")
    reset = getattr(module, "reset_warnings", None)
    if callable(reset):
        reset()


def _measure_into(result: Result, task: Task, backend: Backend, settings: Settings) -> None:
    device = task.device
    _forget_warn_once()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner = task.runner(backend)
        result.first_call_s = time_once(runner.first, device)
        for _ in range(settings.check_calls):
            runner.check()
        outputs = [t.cpu() for t in runner.check()]
    messages = dict.fromkeys(
        f"{w.category.__name__}: {w.message}"[:300]
        for w in caught
        if not any(text in str(w.message) for text in IGNORED_WARNINGS)
    )
    result.warnings = list(messages)[:MAX_WARNINGS]
    timing = time_calls(runner.step, device, settings.repeats, settings.warmup, settings.target_ms)
    result.peak_mib = peak_memory_mib(device)
    for name, value in dynamo_counts().items():
        setattr(result, name, value)
    for field in ("median_ms", "p25_ms", "p75_ms", "min_ms", "max_ms", "iters", "repeats"):
        setattr(result, field, getattr(timing, field))
    del runner
    acc = check_accuracy(outputs, task.eager, task.reference, task.workload.tolerance, device)
    result.accurate, result.cosine, result.rel_error = acc.passed, acc.cosine, acc.rel_error
    result.tol, result.accuracy_note = acc.tol, acc.reason


def fill_speedups(results: list[Result]) -> None:
    """speedup = eager median / backend median, within each row."""
    eager = {r.row_key: r.median_ms for r in results if r.backend == "eager" and r.median_ms}
    for r in results:
        base = eager.get(r.row_key)
        r.speedup = base / r.median_ms if base and r.median_ms else None


def measure_row(
    workload: Workload,
    backends: list[Backend],
    settings: Settings,
    on_done: Callable[[str], None] = lambda _: None,
) -> list[Result]:
    """Every backend on one row, in this process; then the warm-cache first calls."""
    try:
        task = Task(workload)
    except Exception as exc:  # the model itself could not be built or run
        err = f"preparing the row failed: {type(exc).__name__}: {exc}"[:500]
        return [
            dataclasses.replace(_base_result(workload, b), status="error", error=err)
            for b in backends
        ]
    results = []
    for backend in backends:
        results.append(measure_backend(task, backend, settings))
        on_done(backend.name)
    del task
    free_memory(workload.torch_device)
    fill_speedups(results)
    if settings.warm_compile:
        for result, backend in zip(results, backends, strict=True):
            wanted = settings.warm_compile_backends
            if wanted is not None and backend.name not in wanted:
                continue
            if result.status == "ok" and not backend.is_eager and backend.spec:
                result.warm_first_call_s = warm_first_call(workload, backend, settings)
    return results


def first_call_only(workload: Workload, backend: Backend) -> float:
    """The compiling first call alone (what the fresh-process subprocess runs)."""
    task = Task(workload, references=False)
    # One eager call first, as in the main process: CUDA context, cuBLAS and
    # cuDNN start-up are not compile time.
    time_once(task.runner(Backend("eager", None, "eager")).first, task.device)
    reset_dynamo()
    return time_once(task.runner(backend).first, task.device)


def warm_first_call(workload: Workload, backend: Backend, settings: Settings) -> float | None:
    """First-call seconds in a fresh process of the CLI, sharing this run's caches."""
    assert backend.spec is not None
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "--first-call-only",
        "--models",
        workload.model,
        "--scenarios",
        workload.scenario,
        "--batch",
        str(workload.batch),
        "--backends",
        backend.spec,
        "--device",
        workload.device,
        "--dtype",
        workload.dtype,
    ]
    if workload.tiny:
        cmd.append("--tiny")
    if settings.threads:
        cmd += ["--threads", str(settings.threads)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=settings.warm_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith(FIRST_CALL_MARKER):
            value = json.loads(line[len(FIRST_CALL_MARKER) :]).get("first_call_s")
            return float(value) if value is not None else None
    sys.stderr.write(f"warm first call of {backend.name} failed:\n{proc.stderr[-2000:]}\n")
    return None


def default_device() -> str:
    """cuda when a GPU is visible, else cpu."""
    return "cuda" if torch.cuda.is_available() else "cpu"
