"""The result records of a run and their JSON form (results.json).

One ``Result`` per (row, backend). A ``Run`` holds the results of one or more
invocations plus where and how they were measured (``meta``) and the device
ceilings when they were measured. ``Run.from_json(run.to_json()) == run``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCHEMA = 1


@dataclasses.dataclass
class Result:
    """Every metric of one backend on one row; None where not measured."""

    model: str
    scenario: str
    batch: int
    backend: str
    device: str = "cpu"
    dtype: str = "float32"
    tiny: bool = True
    status: str = "ok"  # ok | error | unavailable
    error: str = ""
    median_ms: float | None = None
    p25_ms: float | None = None
    p75_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    iters: int | None = None
    repeats: int | None = None
    speedup: float | None = None
    first_call_s: float | None = None
    warm_first_call_s: float | None = None
    peak_mib: float | None = None
    accurate: bool | None = None
    cosine: float | None = None
    rel_error: float | None = None
    tol: float | None = None
    accuracy_note: str = ""
    graphs: int | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    # Warnings raised while compiling and checking (e.g. a fallback to eager).
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def row_key(self) -> tuple[str, str, int]:
        return (self.model, self.scenario, self.batch)

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.model, self.scenario, self.batch, self.backend)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """Builds a Result, ignoring keys a newer writer may have added."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclasses.dataclass
class Run:
    """A whole run: metadata, optional device ceilings, and the results."""

    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    ceilings: dict[str, float] | None = None
    results: list[Result] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        body = {
            "schema": SCHEMA,
            "meta": self.meta,
            "ceilings": self.ceilings,
            "results": [r.to_dict() for r in self.results],
        }
        return json.dumps(body, indent=2, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> Run:
        body = json.loads(text)
        if body.get("schema") != SCHEMA:
            raise ValueError(f"results schema {body.get('schema')!r}, expected {SCHEMA}")
        return cls(
            meta=body.get("meta") or {},
            ceilings=body.get("ceilings"),
            results=[Result.from_dict(r) for r in body.get("results", [])],
        )

    def save(self, path: Path) -> None:
        path.write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: Path) -> Run:
        return cls.from_json(path.read_text())

    def merged(self, other: Run) -> Run:
        """This run plus ``other``'s results; ``other`` wins where both measured a key."""
        by_key = {r.key: r for r in self.results}
        by_key.update({r.key: r for r in other.results})
        meta = dict(self.meta or other.meta)
        return Run(meta, self.ceilings or other.ceilings, list(by_key.values()))


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def collect_meta(device: str, dtype: str, argv: list[str]) -> dict[str, Any]:
    """Where and how a run was measured: versions, device, date, command line."""
    import torch

    meta: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": " ".join(["python -m benchmarks", *argv]),
        "device": device,
        "dtype": dtype,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_commit": _git_commit(),
    }
    if device.startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name(torch.device(device))
        meta["cuda"] = torch.version.cuda
    for name in ("triton", "mybackend"):
        module = sys.modules.get(name)
        meta[name] = getattr(module, "__version__", None) if module else None
    return meta
