"""``--isolate``: each row in a child process, so a crashing backend costs one row.

The child is this CLI with ``--row-json PATH``: it measures every backend of
the row in one process (as without ``--isolate``), prints ``BENCH_DONE name``
after each backend, and writes its results to PATH. If it dies (a segfault in a
compiler under development, say), the first backend not reported done is marked
``crashed`` and the row is measured again without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.results import Result, Run
from benchmarks.runner import REPO_ROOT
from benchmarks.scenarios import Workload

DONE_MARKER = "BENCH_DONE "


def child_command(w: Workload, specs: list[str], passthrough: list[str], out: Path) -> list[str]:
    """The CLI command measuring row ``w`` for ``specs`` into ``out``."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "--row-json",
        str(out),
        "--no-progress",
        "--models",
        w.model,
        "--scenarios",
        w.scenario,
        "--batch",
        str(w.batch),
        "--backends",
        ",".join(specs),
        "--device",
        w.device,
        "--dtype",
        w.dtype,
    ]
    return cmd + (["--tiny"] if w.tiny else []) + passthrough


def crash_summary(stderr: str) -> str:
    """faulthandler's fatal error and innermost frame, else the last line of stderr."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    fatal = next((line for line in lines if line.startswith("Fatal Python error")), "")
    current = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
    if current is not None and current + 1 < len(lines):
        return f"{fatal} at {lines[current + 1]}".strip()
    return fatal or (lines[-1] if lines else "")


def _crash_result(w: Workload, backend: str, rc: int, stderr: str) -> Result:
    return Result(
        model=w.model,
        scenario=w.scenario,
        batch=w.batch,
        backend=backend,
        device=w.device,
        dtype=w.dtype,
        tiny=w.tiny,
        status="crashed",
        error=f"process died (exit code {rc}): {crash_summary(stderr)}"[:500],
    )


def _attempt(
    w: Workload, specs: list[str], passthrough: list[str]
) -> tuple[list[Result] | None, set[str], int, str]:
    """Runs the child once: (results or None, backends done, exit code, stderr)."""
    with tempfile.TemporaryDirectory(prefix="benchmarks-row-") as tmp:
        out = Path(tmp) / "row.json"
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
        )
        proc = subprocess.run(
            child_command(w, specs, passthrough, out),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        done = {
            line[len(DONE_MARKER) :].strip()
            for line in proc.stdout.splitlines()
            if line.startswith(DONE_MARKER)
        }
        results = Run.load(out).results if proc.returncode == 0 and out.exists() else None
    return results, done, proc.returncode, proc.stderr


def measure_row_isolated(
    w: Workload,
    specs: list[str],
    names: list[str],
    passthrough: list[str],
    on_done: Callable[[str], None] = lambda _: None,
) -> list[Result]:
    """Every backend of row ``w`` in a child process, retried without crashers.

    ``specs`` rebuild the backends in the child; ``names`` are their result names.
    """
    crashed: list[Result] = []
    pending = list(zip(specs, names, strict=True))
    while pending:
        results, done, rc, stderr = _attempt(w, [s for s, _ in pending], passthrough)
        if results is not None:
            for _, name in pending:
                on_done(name)
            order = {name: i for i, name in enumerate(names)}
            return sorted(crashed + results, key=lambda r: order.get(r.backend, len(order)))
        culprit = next(((s, n) for s, n in pending if n not in done), pending[-1])
        sys.stderr.write(
            f"{w.model} {w.scenario} b{w.batch}: {culprit[1]} crashed "
            f"(exit code {rc})\n{stderr[-1500:]}\n"
        )
        crashed.append(_crash_result(w, culprit[1], rc, stderr))
        on_done(culprit[1])
        pending.remove(culprit)
    return crashed
