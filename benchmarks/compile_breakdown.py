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

import torch

from benchmarks.backends import Backend, resolve
from benchmarks.common import reset_dynamo, time_once
from benchmarks.scenarios import Task, Workload
from mybackend import compile_times
from mybackend.reports import collecting


def measure(workload: Workload, backend: Backend) -> tuple[dict[str, float], float]:
    """Seconds per stage of ``backend``'s first call on ``workload``, and the
    call's CPU seconds (this process): on a shared machine the stages' wall
    times stretch with the load, the CPU time much less."""
    task = Task(workload, references=False)
    time_once(task.runner(Backend("eager", None, "eager")).first, task.device)
    reset_dynamo()
    runner = task.runner(backend)
    before = compile_times.snapshot()
    cpu = time.process_time()
    with collecting() as records:
        seconds = time_once(runner.first, task.device)
    cpu = time.process_time() - cpu
    return compile_times.breakdown(before, compile_times.snapshot(), seconds, records), cpu


def table(columns: dict[str, tuple[dict[str, float], float]]) -> str:
    """A markdown table: one row per stage, one column per measured row."""
    stages = list(dict.fromkeys(s for c, _ in columns.values() for s in c))
    lines = ["| stage (s) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for stage in stages:
        cells = [f"{c[stage]:.2f}" if stage in c else "-" for c, _ in columns.values()]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(c.values()):.2f}**" for c, _ in columns.values()]
    lines.append("| first call | " + " | ".join(totals) + " |")
    cpu = [f"{seconds:.2f}" for _, seconds in columns.values()]
    lines.append("| first call, CPU time of the process | " + " | ".join(cpu) + " |")
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
    columns: dict[str, tuple[dict[str, float], float]] = {}
    for model in args.models.split(","):
        workload = Workload(model, args.scenario, args.batch, args.device, dtype, args.tiny)
        for name in args.backends.split(","):
            runs = [measure(workload, resolve(name)) for _ in range(args.repeats)]
            columns[f"{model} {name}"] = min(runs, key=lambda run: run[1])
            print(f"measured {model} {name}", file=sys.stderr, flush=True)
    print(table(columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
