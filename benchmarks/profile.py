"""Where a model's GPU time goes, per backend: the kernels of one step.

    python -m benchmarks.profile --models bert_base --batch 1 \\
        --backends inductor-reduce-overhead,mybackend-reduce-overhead

Builds the same workload the benchmark rows use (benchmarks/scenarios.py),
warms each backend up, then records ``--steps`` steps with torch.profiler and
prints, per backend, the GPU time per step, the kernels launched per step,
and the kernels that take the most time. The question it answers is the one
a slower row raises: which kernels does one backend run that the other does
not, or runs slower. Writes ``profile.md`` to ``--out`` as well.

It also gives the host time per step: the median time from calling a step
on an idle GPU to its return (launching, not waiting). A step whose host
time exceeds its GPU time is bound by the host, and faster kernels will not
show in its wall time. ``--host`` adds the CPU side's own table: the ops
and mybackend's engine ranges (Note [Profiler ranges]) by self CPU time;
``--shapes`` splits its rows by the ops' input shapes. A generated
kernel's row names its group: the plan's kind and the operators it runs.
``--host-split``
times mybackend's own steps without the profiler (Note [Host time by step]
in src_cpp/runtime/host_times.h): per step, each engine kind, each ATen
operator the graphs run, the graphs' runs and calls from Python, and what the
step spends outside the compiled graphs.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks.backends import resolve
from benchmarks.common import reset_dynamo
from benchmarks.report import markdown_table
from benchmarks.runner import Settings
from benchmarks.scenarios import Task, Workload
from mybackend.reports import collecting, host_times_by_label, kernel_group_of, kernel_groups


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_ms_per_step(step: Callable[[], None], steps: int) -> float:
    """The median host time of a step that starts on an idle GPU."""
    times = []
    for _ in range(steps):
        _synchronize()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    _synchronize()
    return 1e3 * statistics.median(times)


def cpu_table(step: Callable[[], None], steps: int, top: int, shapes: bool = False) -> str:
    """CPU-side ops and ranges of ``steps`` steps, by self CPU time per step;
    with ``shapes``, one row per op and input shapes (which call of an op
    costs what: a gather of the loss against a gather of an index)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        for _ in range(steps):
            step()
        _synchronize()
    averages = prof.key_averages(group_by_input_shape=shapes)
    events = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:top]
    rows = [
        [
            e.key[:70],
            f"{e.self_cpu_time_total / steps:.0f}",
            f"{e.cpu_time_total / steps:.0f}",
            f"{e.count / steps:.0f}",
            *([str(e.input_shapes)[:80]] if shapes else []),
        ]
        for e in events
    ]
    head = "CPU side (under the profiler, which slows it), per step:\n\n"
    columns = (
        "op or range",
        "self us",
        "total us",
        "calls",
        *(("input shapes",) if shapes else ()),
    )
    return head + markdown_table(columns, rows)


HostTotals = dict[str, tuple[int, float]]


def host_split_table(before: HostTotals, after: HostTotals, steps: int, host_ms: float) -> str:
    """The host time per step of ``steps`` steps by step label, from the
    summed host times (host_times_by_label) before and after them; the row
    "outside the compiled graphs" is ``host_ms`` less the calls from Python."""
    per_step: dict[str, tuple[float, float]] = {}
    for label, (calls, us) in after.items():
        was_calls, was_us = before.get(label, (0, 0.0))
        if calls > was_calls:
            per_step[label] = ((calls - was_calls) / steps, (us - was_us) / steps)
    if not per_step:
        return "No host times: the graphs were not compiled with MYBACKEND_HOST_TIMES=1."
    boundary = "call from Python (run included)"
    inside_us = per_step.get(boundary, (0.0, 0.0))[1]
    rows = [[label, f"{calls:.0f}", f"{us:.0f}"] for label, (calls, us) in per_step.items()]
    rows.sort(key=lambda r: (r[0] != boundary, r[0] != "run (whole graph)", -float(r[2])))
    rows.insert(0, ["outside the compiled graphs", "", f"{1e3 * host_ms - inside_us:.0f}"])
    head = (
        f"mybackend's host time per step by step label, no profiler ({host_ms:.3f} ms a step; "
        "the engine rows include their ATen form when they fall back):\n\n"
    )
    return head + markdown_table(("label", "calls", "us"), rows)


def kernel_table(
    backend: str,
    task: Task,
    steps: int,
    top: int,
    host: bool = False,
    shapes: bool = False,
    host_split: bool = False,
) -> str:
    split = host_split and backend.startswith("mybackend")
    # MYBACKEND_HOST_TIMES is read at each compile: set around the compiling calls.
    host_times = {"MYBACKEND_HOST_TIMES": "1"} if split else {}
    with collecting() as records, mock.patch.dict(os.environ, host_times):
        runner = task.runner(resolve(backend))
        runner.first()
        # As many as the benchmark rows warm up: fewer would profile mybackend's
        # eager floor while it still alternates the two sides (Note [Eager is the
        # floor]), mixing the ATen graph's kernels into the compiled graph's.
        for _ in range(Settings().warmup):
            runner.step()
    before = host_times_by_label(records)
    host_ms = host_ms_per_step(runner.step, steps)
    split_text = host_split_table(before, host_times_by_label(records), steps, host_ms)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            runner.step()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            totals[event.name] += event.device_time / steps
            counts[event.name] += 1
    total_us = sum(totals.values())
    launches = sum(counts.values()) / steps
    # A generated kernel's row names its group (the plan's kind and operators).
    groups = kernel_groups(records)
    rows = [
        [
            name[:90],
            f"{us:.1f}",
            f"{counts[name] / steps:.0f}",
            f"{100 * us / total_us:.0f}%",
            *([kernel_group_of(name, groups)[:120]] if groups else []),
        ]
        for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    ]
    head = (
        f"### {backend}: {total_us / 1e3:.3f} ms of GPU time per step, {launches:.0f} kernels, "
        f"{host_ms:.3f} ms of host time per step\n\n"
    )
    columns = ("kernel", "us/step", "calls/step", "share", *(("group",) if groups else ()))
    table = head + markdown_table(columns, rows)
    if split:
        table += "\n\n" + split_text
    if host:
        table += "\n\n" + cpu_table(runner.step, min(steps, 3), top, shapes)
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--backends", default="inductor-reduce-overhead,mybackend-reduce-overhead")
    p.add_argument("--scenario", default="inference")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--host", action="store_true", help="add the CPU-side table per backend")
    p.add_argument("--shapes", action="store_true", help="--host, its rows split by input shapes")
    p.add_argument(
        "--host-split",
        action="store_true",
        help="mybackend's host time per step by engine kind and ATen op, without the profiler",
    )
    p.add_argument("--out", type=Path, default=Path("bench_out/profile"))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.profile needs a CUDA GPU", file=sys.stderr)
        return 2
    sections = []
    for model in args.models.split(","):
        task = Task(Workload(model, args.scenario, args.batch, "cuda", "bfloat16", tiny=False))
        for backend in args.backends.split(","):
            reset_dynamo()
            try:
                table = kernel_table(
                    backend,
                    task,
                    args.steps,
                    args.top,
                    args.host or args.shapes,
                    args.shapes,
                    args.host_split,
                )
            except Exception as exc:  # one failing backend must not end the run
                table = f"### {backend}: failed ({type(exc).__name__}: {exc})"[:300]
            sections.append(f"## {model} {args.scenario} batch {args.batch}\n\n{table}\n")
            print(sections[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.md").write_text("\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
