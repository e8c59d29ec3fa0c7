"""Same-process A/B of an environment knob that mybackend reads when it compiles.

    python -m benchmarks.ab_env --models pythia_160m --scenario training --batch 16 \\
        --env MYBACKEND_VIEW_REPLAY=1,0 --rounds 2

The knobs of Note [Options from the environment] (kill switches such as
MYBACKEND_VIEW_REPLAY and MYBACKEND_GENERATED_KERNELS, launch tuning such
as MYBACKEND_PW_BLOCK) and MYBACKEND_DISABLED_PASSES (mybackend's graph passes
by name; ``--env "MYBACKEND_DISABLED_PASSES= ,causal_masks"`` times a pass on
and off, the blank setting disabling none) are read at each compile, so one
process can compile a model once per setting and time each in turn: the
settings alternate for ``--rounds`` rounds (on, off, on, off ...), each a
fresh compile of the same model, warmed up as the benchmark rows are, then
timed as the rows time (``benchmarks.common.time_block``: blocks of
back-to-back steps, CUDA events around each block). Same process, same GPU,
same inputs: differences between machines and processes, which move a
default-mode training row by more than a host-side change does, cancel.
Prints, per setting and round, the median step time of ``--blocks`` blocks,
and the median over rounds last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from benchmarks.backends import resolve
from benchmarks.common import free_memory, reset_dynamo, time_block
from benchmarks.models import get_model
from benchmarks.report import markdown_table
from benchmarks.runner import Settings
from benchmarks.scenarios import Task, Workload


@contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """``name=value`` for the block; the variable's earlier state after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def time_setting(task: Task, backend: str, name: str, value: str, steps: int, blocks: int) -> float:
    """The median block of one fresh compile under ``name=value``."""
    reset_dynamo()
    free_memory(task.device)
    with environment(name, value):
        runner = task.runner(resolve(backend))
        runner.first()
        for _ in range(Settings().warmup):
            runner.step()
        return statistics.median(time_block(runner.step, task.device, steps) for _ in range(blocks))


def parse_env(text: str) -> tuple[str, list[str]]:
    """``NAME=v1,v2`` into the name and its settings (at least two)."""
    name, sep, values = text.partition("=")
    settings = [v for v in values.split(",") if v != ""]
    if not sep or not name or len(settings) < 2:
        raise argparse.ArgumentTypeError(f"--env takes NAME=V1,V2[,...], got {text!r}")
    return name, settings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--env", required=True, type=parse_env, help="NAME=V1,V2[,...]")
    p.add_argument("--backend", default="mybackend")
    p.add_argument("--scenario", default="training")
    p.add_argument("--batch", type=int, default=None, help="default: the row's own")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps per timed block")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="the models' tiny variants")
    args = p.parse_args(argv)
    name, settings = args.env
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    rows = []
    for model in args.models.split(","):
        batch = args.batch
        if batch is None:
            training = args.scenario == "training"
            batch = get_model(model).training_batch(args.tiny) if training else 1
        workload = Workload(model, args.scenario, batch, args.device, dtype, tiny=args.tiny)
        task = Task(workload, references=False)
        times: dict[str, list[float]] = {v: [] for v in settings}
        for _ in range(args.rounds):
            for value in settings:
                ms = time_setting(task, args.backend, name, value, args.steps, args.blocks)
                times[value].append(ms)
                print(f"{model} {name}={value}: {ms:.3f} ms a step", flush=True)
        for value in settings:
            rounds = " / ".join(f"{ms:.3f}" for ms in times[value])
            rows.append(
                [model, f"{name}={value}", rounds, f"{statistics.median(times[value]):.3f}"]
            )
    print()
    print(markdown_table(("model", "setting", "ms a step, per round", "median"), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
