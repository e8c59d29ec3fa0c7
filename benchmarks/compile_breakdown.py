"""Where the compiling first call of a benchmark row spends its time.

``python -m benchmarks.compile_breakdown --models resnet50,bert_base --batch 2``
times the same first call as the harness's "first call s" column (the eager
call before it included, see ``runner.first_call_only``) and splits it with
``mybackend.compile_times``: dynamo, aot_autograd's stages (metadata, joint
trace, min-cut partition, the rest), mybackend's joint-graph passes (part
of the partition stage), lowering and C++ stages, and the rest of the call
(running the step). Full-size models unless ``--tiny``; ``--repeats N``
keeps the first call of least CPU time of N in this process;
``--processes N`` measures each cell in N fresh interpreters and shows the
median of each stage (a compile's first call in a process pays for imports
and caches that a second one does not). ``--warm`` (with ``--processes``)
gives each cell a fresh pair of cache folders (torch's, which holds the
AOTAutograd cache that option ``warm_start`` uses, and mybackend's kernel
cache): one process compiles cold, then N processes start warm from what it
left, and the table shows both (issue 35: a warm first call within dynamo's
own tracing time and half a second). ``--as-cuda`` (CPU only) traces
and rewrites the graphs as a CUDA graph would be: CUDA's decomposition
table, the batch-norm rewrite, the layout plan and the matrix-product
padding; the core then plans CPU graphs, and no kernel is generated, so it
measures the Python side of a GPU compile on a machine without one.
docs/performance.md ("Compile time") shows its tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import torch

from benchmarks.backends import Backend, resolve
from benchmarks.common import reset_dynamo, time_once
from benchmarks.cuda_simulation import as_cuda
from benchmarks.scenarios import Task, Workload
from mybackend import _C, compile_times
from mybackend.aot import JOINT_PASSES
from mybackend.compile_times import DYNAMO_STAGE
from mybackend.reports import collecting

JOINT_STAGE = "mybackend joint-graph passes (layout, padding, CSE; in partition)"


class Measured(NamedTuple):
    stages: dict[str, float]  # seconds per stage of the first call
    cpu: float  # the call's CPU seconds (this process)
    kernels: dict[str, int]  # what the call added to the kernel cache's counters
    # What the call added to mybackend's compile counters (Note [Compile counters]).
    events: dict[str, int] = {}
    # A second call, compiled already: the run that "rest of the call" holds.
    second_call: float = 0.0


def measure(workload: Workload, backend: Backend) -> Measured:
    """``backend``'s first call on ``workload``: on a shared machine the
    stages' wall times stretch with the load, the CPU time much less."""
    task = Task(workload, references=False)
    time_once(task.runner(Backend("eager", None, "eager")).first, task.device)
    reset_dynamo()
    runner = task.runner(backend)
    before = compile_times.snapshot()
    events_before = compile_times.counts()
    kernels_before = _C.kernel_cache_stats()
    cpu = time.process_time()
    with collecting() as records:
        seconds = time_once(runner.first, task.device)
    cpu = time.process_time() - cpu
    after = compile_times.snapshot()
    kernels_after = _C.kernel_cache_stats()
    kernels = {k: kernels_after[k] - kernels_before.get(k, 0) for k in kernels_after}
    events = {k: v - events_before.get(k, 0) for k, v in compile_times.counts().items()}
    second_call = time_once(runner.first, task.device)
    stages = split_joint_passes(
        compile_times.breakdown(before, after, seconds, records),
        after.get(JOINT_PASSES, 0.0) - before.get(JOINT_PASSES, 0.0),
    )
    return Measured(stages, cpu, kernels, {k: v for k, v in events.items() if v}, second_call)


def split_joint_passes(stages: dict[str, float], joint: float) -> dict[str, float]:
    """The partition stage less mybackend's joint-graph passes, which get a
    row of their own just after it."""
    if joint <= 0.0 or compile_times.PARTITION not in stages:
        return stages
    split: dict[str, float] = {}
    for name, seconds in stages.items():
        if name == compile_times.PARTITION:
            split[name] = max(seconds - joint, 0.0)
            split[JOINT_STAGE] = joint
        else:
            split[name] = seconds
    return split


def median(runs: list[Measured]) -> Measured:
    """Each stage's median over fresh-process runs (a stage a run lacks
    counts as 0), the median CPU time and kernel counters."""
    names = list(dict.fromkeys(s for run in runs for s in run.stages))
    stages = {s: statistics.median(run.stages.get(s, 0.0) for run in runs) for s in names}
    return Measured(
        stages,
        statistics.median(run.cpu for run in runs),
        _median_counts([run.kernels for run in runs]),
        _median_counts([run.events for run in runs]),
        statistics.median(run.second_call for run in runs),
    )


def _median_counts(counters: list[dict[str, int]]) -> dict[str, int]:
    keys = list(dict.fromkeys(k for counter in counters for k in counter))
    return {k: int(statistics.median(c.get(k, 0) for c in counters)) for k in keys}


def measure_in_fresh_process(
    args: argparse.Namespace, model: str, backend: str, env: dict[str, str] | None = None
) -> Measured:
    """One cell measured by a new interpreter (``--cell``), with ``env``
    added to this process's environment."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in _CELL_OPTIONS]
    flags += ["--as-cuda"] if args.as_cuda else []
    flags += ["--tiny"] if args.tiny else []
    command = [sys.executable, "-m", "benchmarks.compile_breakdown", *flags]
    done = subprocess.run(
        [*command, f"--models={model}", f"--backends={backend}", "--cell"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{model} {backend} failed:\n{done.stderr[-3000:]}")
    cell = json.loads(done.stdout.strip().splitlines()[-1])
    return Measured(
        cell["stages"], cell["cpu"], cell["kernels"], cell["events"], cell["second_call"]
    )


def cache_folders(root: str) -> dict[str, str]:
    """The environment that puts torch's caches (the AOTAutograd cache among
    them) and mybackend's kernel cache under ``root``."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "torch"),
        "MYBACKEND_CACHE_DIR": os.path.join(root, "mybackend"),
    }


def measure_cold_and_warm(
    args: argparse.Namespace, model: str, backend: str
) -> tuple[Measured, Measured]:
    """One fresh process on empty caches, then the median of --processes
    fresh processes on what it left."""
    with tempfile.TemporaryDirectory(prefix="compile_breakdown_") as root:
        env = cache_folders(root)
        cold = measure_in_fresh_process(args, model, backend, env)
        warm = [measure_in_fresh_process(args, model, backend, env) for _ in range(args.processes)]
    return cold, median(warm)


_CELL_OPTIONS = ("scenario", "batch", "device", "dtype")


def kernel_rows(kernels: dict[str, int]) -> dict[str, str]:
    """The generated-kernel counters of a call as table cells (Note
    [Compile-time counters] in codegen/kernel_cache.cpp)."""
    return {
        "generated kernels: NVRTC compiles / disk hits": (
            f"{kernels.get('compiles', 0)} / {kernels.get('disk_hits', 0)}"
        ),
        "generated kernels: NVRTC time summed over threads": (
            f"{kernels.get('compile_us', 0) / 1e6:.2f}"
        ),
        "generated kernels: wall time of compile batches": (
            f"{kernels.get('batch_wall_us', 0) / 1e6:.2f}"
        ),
    }


def first_calls(columns: dict[str, Measured]) -> str:
    """Each column's first call and dynamo's part of it, in one line: what a
    run stopped before its table still printed."""
    return "; ".join(
        f"{name} first call {sum(m.stages.values()):.2f} s, "
        f"dynamo {m.stages.get(DYNAMO_STAGE, 0.0):.2f} s"
        for name, m in columns.items()
    )


def table(columns: dict[str, Measured]) -> str:
    """A markdown table: one row per stage, one column per measured row,
    then the call's CPU time and its generated-kernel counters."""
    stages = list(dict.fromkeys(s for m in columns.values() for s in m.stages))
    lines = ["| stage (s) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for stage in stages:
        cells = [f"{m.stages[stage]:.2f}" if stage in m.stages else "-" for m in columns.values()]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(m.stages.values()):.2f}**" for m in columns.values()]
    lines.append("| first call | " + " | ".join(totals) + " |")
    cpu = [f"{m.cpu:.2f}" for m in columns.values()]
    lines.append("| first call, CPU time of the process | " + " | ".join(cpu) + " |")
    second = [f"{m.second_call:.2f}" for m in columns.values()]
    lines.append("| second call (the run alone) | " + " | ".join(second) + " |")
    overhead = [f"{sum(m.stages.values()) - m.second_call:.2f}" for m in columns.values()]
    lines.append("| first call less the second | " + " | ".join(overhead) + " |")
    rows = [kernel_rows(m.kernels) for m in columns.values()]
    for name in rows[0] if rows else ():
        lines.append(f"| {name} | " + " | ".join(r[name] for r in rows) + " |")
    for event in dict.fromkeys(e for m in columns.values() for e in m.events):
        cells = [str(m.events.get(event, 0)) for m in columns.values()]
        lines.append(f"| mybackend: {event} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,bert_base")
    p.add_argument("--backends", default="mybackend,aot-eager")
    p.add_argument("--scenario", default="training", choices=("training", "inference"))
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, else float32")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--repeats", type=int, default=1, help="keep the fastest of N first calls")
    p.add_argument("--processes", type=int, default=0, help="median of N fresh processes per cell")
    p.add_argument(
        "--warm",
        action="store_true",
        help="per cell: a cold process on fresh caches, then --processes warm ones",
    )
    p.add_argument(
        "--as-cuda", action="store_true", help="CPU graphs traced and rewritten as CUDA's"
    )
    p.add_argument("--cell", action="store_true", help=argparse.SUPPRESS)  # one cell, as JSON
    args = p.parse_args(argv)
    if args.warm and args.processes < 1:
        p.error("--warm measures fresh processes: give --processes N (N >= 1)")
    if args.as_cuda and args.device != "cpu":
        p.error("--as-cuda simulates a CUDA compile on the CPU: use it with --device cpu")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    columns: dict[str, Measured] = {}
    simulated = as_cuda() if args.as_cuda else contextlib.nullcontext()
    with simulated:
        for model in args.models.split(","):
            workload = Workload(
                model, args.scenario, args.batch, args.device, args.dtype, args.tiny
            )
            for name in args.backends.split(","):
                if args.warm:
                    cold, warm = measure_cold_and_warm(args, model, name)
                    columns[f"{model} {name} cold"] = cold
                    columns[f"{model} {name} warm"] = warm
                elif args.processes > 0:
                    runs = [
                        measure_in_fresh_process(args, model, name) for _ in range(args.processes)
                    ]
                    columns[f"{model} {name}"] = median(runs)
                else:
                    runs = [measure(workload, resolve(name)) for _ in range(args.repeats)]
                    columns[f"{model} {name}"] = min(runs, key=lambda run: run.cpu)
                measured = {k: v for k, v in columns.items() if k.startswith(f"{model} {name}")}
                print(
                    f"measured {model} {name}: {first_calls(measured)}", file=sys.stderr, flush=True
                )
    if args.cell:
        print(json.dumps(columns.popitem()[1]._asdict()))
        return 0
    print(table(columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
