"""Where the compiling first call of a benchmark row spends its time.

``python -m benchmarks.compile_breakdown --models resnet50,bert_base --batch 2``
times the same first call as the harness's "first call s" column (the eager
call before it included, see ``runner.first_call_only``) and splits it with
``mybackend.compile_times``: dynamo, aot_autograd's stages (metadata, joint
trace, min-cut partition, the rest), mybackend's lowering and C++ stages, and
the rest of the call (running the step). Full-size models unless ``--tiny``;
``--repeats N`` keeps the first call of least CPU time of N (shared machines).
docs/performance.md ("Compile time") shows its tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NamedTuple

import torch

from benchmarks.backends import Backend, resolve
from benchmarks.common import reset_dynamo, time_once
from benchmarks.scenarios import Task, Workload
from mybackend import _C, compile_times
from mybackend.reports import collecting


class Measured(NamedTuple):
    stages: dict[str, float]  # seconds per stage of the first call
    cpu: float  # the call's CPU seconds (this process)
    kernels: dict[str, int]  # what the call added to the kernel cache's counters


def measure(workload: Workload, backend: Backend) -> Measured:
    """``backend``'s first call on ``workload``: on a shared machine the
    stages' wall times stretch with the load, the CPU time much less."""
    task = Task(workload, references=False)
    time_once(task.runner(Backend("eager", None, "eager")).first, task.device)
    reset_dynamo()
    runner = task.runner(backend)
    before = compile_times.snapshot()
    kernels_before = _C.kernel_cache_stats()
    cpu = time.process_time()
    with collecting() as records:
        seconds = time_once(runner.first, task.device)
    cpu = time.process_time() - cpu
    kernels_after = _C.kernel_cache_stats()
    kernels = {k: kernels_after[k] - kernels_before.get(k, 0) for k in kernels_after}
    stages = compile_times.breakdown(before, compile_times.snapshot(), seconds, records)
    return Measured(stages, cpu, kernels)


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
    rows = [kernel_rows(m.kernels) for m in columns.values()]
    for name in rows[0] if rows else ():
        lines.append(f"| {name} | " + " | ".join(r[name] for r in rows) + " |")
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
    args = p.parse_args(argv)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    columns: dict[str, Measured] = {}
    for model in args.models.split(","):
        workload = Workload(model, args.scenario, args.batch, args.device, dtype, args.tiny)
        for name in args.backends.split(","):
            runs = [measure(workload, resolve(name)) for _ in range(args.repeats)]
            columns[f"{model} {name}"] = min(runs, key=lambda run: run.cpu)
            print(f"measured {model} {name}", file=sys.stderr, flush=True)
    print(table(columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
