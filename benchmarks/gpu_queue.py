"""Runs several ``gpu_run.sh`` steps at once, one per GPU, inside one deadline.

``bash benchmarks/gpu_run.sh queue "infer resnet50" "train gpt2" micro ...``
lands here. A machine with several GPUs finishes the whole table in one device
call: each GPU takes the next step from the queue (in the order given, so
list the longest first) and runs it alone on that GPU (CUDA_VISIBLE_DEVICES),
with its step limit cut to what is left of the deadline. When the queue is
empty the steps' results.json files are merged into one report
(``merged/results.md``, printed last); each step's measurement rows are
printed as soon as it ends, so a call stopped before the merge (its command
limit) still returns them. The steps write into a work folder;
``--out`` receives only ``queue.tgz`` (everything) and ``results.md``, because
the device tool returns a few files.

``--models zoo`` (or names and zoo families, comma-separated) adds one
``model NAME`` step per model: the model zoo, one model per GPU (``gpu_run.sh
zoo``). Models the deadline left unstarted are printed as the command that
runs them.

Steps share the host's CPUs: compile times measured this way include that
contention (stated beside the figures in docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "gpu_run.sh"
# gpu_run.sh steps whose second word is a model (their folder is STEP-MODEL).
MODEL_STEPS = ("infer", "train", "profile", "model")


@dataclass
class Running:
    step: str
    gpu: int
    proc: subprocess.Popen[bytes]
    log: Path
    started: float


def visible_gpus() -> list[int]:
    """The GPU indices this process may use (honours CUDA_VISIBLE_DEVICES)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [int(x) for x in listed.split(",") if x.strip()]
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return list(range(count))


def step_folder(step: str) -> str:
    """``infer resnet50 --batch 1`` -> ``infer-resnet50``: the folder gpu_run.sh writes."""
    words = shlex.split(step)
    name = words[0]
    if name in MODEL_STEPS and len(words) > 1:
        name += "-" + words[1]
    return name


def model_steps(selection: str, options: str = "") -> list[str]:
    """``zoo``, ``cnn,resnet18``... -> ``["model NAME OPTIONS", ...]``, one step
    per model (benchmarks.models.select_models), in registry order."""
    from benchmarks.models import select_models

    words = [w.strip() for w in selection.split(",") if w.strip()]
    return [f"model {name} {options}".strip() for name in select_models(words or ["zoo"])]


def start(step: str, gpu: int, out: Path, seconds: float, script: Path = SCRIPT) -> Running:
    log = out / f"{step_folder(step)}.log"
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES=str(gpu), OUT=str(out), STEP_SECONDS=str(int(seconds)))
    env.pop("BUILD", None)  # built once, before the queue
    handle = log.open("wb")
    proc = subprocess.Popen(
        ["bash", str(script), *shlex.split(step)], env=env, stdout=handle, stderr=subprocess.STDOUT
    )
    handle.close()
    print(f"[queue] GPU {gpu}: {step} (limit {int(seconds)} s)", flush=True)
    return Running(step, gpu, proc, log, time.monotonic())


def run_queue(
    steps: list[str], gpus: list[int], out: Path, deadline_s: float, script: Path = SCRIPT
) -> list[str]:
    """Runs the steps; returns the ones that never started (deadline reached)."""
    end = time.monotonic() + deadline_s
    pending = list(steps)
    free = list(gpus)
    running: list[Running] = []
    while pending or running:
        left = end - time.monotonic()
        while pending and free and left > 60:
            running.append(start(pending.pop(0), free.pop(0), out, left - 20, script))
        for job in list(running):
            code = job.proc.poll()
            if code is None:
                continue
            took = time.monotonic() - job.started
            print(f"[queue] GPU {job.gpu}: {job.step} done in {took:.0f} s (exit {code})")
            print_measurements(out / step_folder(job.step))
            running.remove(job)
            free.append(job.gpu)
        if not running and (not pending or left <= 60):
            break
        time.sleep(0.2)
    return pending


MEASUREMENTS = "## All measurements"


def print_measurements(folder: Path) -> None:
    """Prints a finished step's rows (its results.md's measurement table) as
    soon as it ends: a queue stopped later, before its merged report, still
    leaves every finished row in the call's output."""
    results = folder / "results.md"
    if not results.exists():
        return
    lines = results.read_text(errors="replace").splitlines()
    if MEASUREMENTS not in lines:
        return
    start = lines.index(MEASUREMENTS) + 1
    rows = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append(line)
    print("\n".join(rows), flush=True)


def merge(out: Path) -> Path | None:
    runs = sorted(p.parent for p in out.glob("*/results.json"))
    if not runs:
        return None
    merged = out / "merged"
    cmd = [sys.executable, "-m", "benchmarks.report", *map(str, runs), "--out", str(merged)]
    subprocess.run(cmd, check=False, capture_output=True)
    return merged / "results.md" if (merged / "results.md").exists() else None


def pack(work: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(work.iterdir()):
            tar.add(path, arcname=path.name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("steps", nargs="*", help="gpu_run.sh steps, each one quoted argument")
    p.add_argument(
        "--models",
        help="comma list of models, 'zoo' or zoo families: one 'model NAME' step each, "
        "after the steps",
    )
    p.add_argument(
        "--model-options",
        default="",
        help="python -m benchmarks options appended to each 'model NAME' step",
    )
    p.add_argument("--out", type=Path, required=True, help="gets queue.tgz and results.md")
    p.add_argument("--work", type=Path, default=Path("/tmp/mybackend-queue"))
    p.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole queue")
    args = p.parse_args(argv)
    steps = list(args.steps)
    steps += model_steps(args.models, args.model_options) if args.models else []
    if not steps:
        p.error("give steps, --models, or both")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    gpus = visible_gpus()
    if not gpus:
        print("[queue] no GPU visible", file=sys.stderr)
        return 2
    never = run_queue(steps, gpus, args.work, args.deadline)
    for step in never:
        print(f"[queue] not started (deadline): {step}")
    left = [shlex.split(step)[1] for step in never if step.startswith("model ")]
    if left:
        rerun = f"bash benchmarks/gpu_run.sh zoo {','.join(left)} {args.model_options}"
        print(f"[queue] to run them: {rerun.strip()}")
    for log in sorted(args.work.glob("*.log")):
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        print(f"--- {log.stem}: " + " / ".join(tail))
    table = merge(args.work)
    pack(args.work, args.out / "queue.tgz")
    if table is not None:
        (args.out / "results.md").write_text(table.read_text())
        print(table.read_text())
    return 1 if never else 0


if __name__ == "__main__":
    sys.exit(main())
