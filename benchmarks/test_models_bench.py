"""The model benchmarks as pytest-benchmark tests.

``pytest benchmarks/ --benchmark-only`` times the same rows as the CLI, one test
per (row, backend), grouped per model workload (``model/scenario/bN``) so that
pytest-benchmark compares the backends of one workload with each other. The
compiling first call happens before timing; its time, the accuracy verdict and
the graph counts go to ``extra_info``. A backend failing the accuracy check
fails its test: a fast wrong answer is not a result.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from benchmarks.backends import DEFAULT_CPU, DEFAULT_GPU, Backend, resolve
from benchmarks.common import (
    check_accuracy,
    dynamo_counts,
    free_memory,
    reset_dynamo,
    synchronize,
    time_once,
)
from benchmarks.models import select_models
from benchmarks.scenarios import Task, Workload, workloads

ON_GPU = torch.cuda.is_available()
CPU_BACKENDS = DEFAULT_CPU
GPU_BACKENDS = DEFAULT_GPU


def _option(config: pytest.Config, name: str) -> list[str] | None:
    value = config.getoption(name, default=None)
    return [v for v in value.split(",") if v] if value else None


def _cases(config: pytest.Config) -> list[tuple[Workload, str]]:
    """(row, backend name) pairs: rows outermost, so each row's Task is built once."""
    device, dtype = ("cuda", "bfloat16") if ON_GPU else ("cpu", "float32")
    batch = _option(config, "--bench-batch")
    rows = workloads(
        select_models(_option(config, "--bench-models")),
        _option(config, "--bench-scenarios") or ["inference", "training"],
        [int(b) for b in batch] if batch else None,
        device,
        dtype,
        tiny=not ON_GPU,
    )
    if not ON_GPU and not batch:  # the small CPU set: inference at batch 1 only
        rows = [w for w in rows if w.scenario == "training" or w.batch == 1]
    backends = _option(config, "--bench-backends") or list(GPU_BACKENDS if ON_GPU else CPU_BACKENDS)
    return [(w, b) for w in rows for b in backends]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = _cases(metafunc.config)
        ids = [f"{w.model}-{w.scenario}-b{w.batch}-{b}" for w, b in cases]
        metafunc.parametrize("case", cases, ids=ids)


@functools.lru_cache(maxsize=1)
def _task(workload: Workload) -> Task:
    return Task(workload)


def _compile_and_check(task: Task, backend: Backend) -> tuple[Any, dict[str, Any]]:
    """The compiled runner and what goes to extra_info (first call, accuracy, counts)."""
    runner = task.runner(backend)
    info: dict[str, Any] = {"first_call_s": time_once(runner.first, task.device)}
    runner.check()
    acc = check_accuracy(
        [t.cpu() for t in runner.check()], task.eager, task.reference, task.workload.tolerance
    )
    info.update(
        accurate=acc.passed,
        cosine=acc.cosine,
        rel_error=acc.rel_error,
        accuracy_note=acc.reason,
        **dynamo_counts(),
    )
    return runner, info


def test_model(benchmark: Any, case: tuple[Workload, str]) -> None:
    workload, name = case
    backend = resolve(name)
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    task = _task(workload)
    reset_dynamo()
    free_memory(task.device)
    runner, info = _compile_and_check(task, backend)
    benchmark.group = f"{workload.model}/{workload.scenario}/b{workload.batch}"
    benchmark.extra_info.update(info, device=workload.device, dtype=workload.dtype)

    def step() -> None:
        runner.step()
        synchronize(task.device)

    rounds = 20 if ON_GPU else 5
    # Warm-up past mybackend's eager floor (benchmarks/runner.py, Settings.warmup).
    benchmark.pedantic(step, rounds=rounds, iterations=1, warmup_rounds=20)
    reset_dynamo()
    assert info["accurate"], info["accuracy_note"]
