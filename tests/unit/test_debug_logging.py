"""TORCH_LOGS, MYBACKEND_LOGS and TORCH_TRACE (tlparse) output of mybackend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.testing import HANG_GUARD_S

MODEL = """
import torch
def f(x):
    y = torch.exp(x) * 2
    y = torch.cumsum(y, 0)
    return torch.relu(y) + 1
print(torch.compile(f, backend="mybackend")(torch.randn(8)).shape)
"""


def _run(env: dict[str, str], code: str = MODEL) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "MYBACKEND_LOGS")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env=full, check=False,
    )  # fmt: skip


def test_torch_logs_plus_mybackend_turns_on_debug_channels() -> None:
    done = _run({"TORCH_LOGS": "+mybackend"})
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stderr
    assert "compiled graph0.inference: 2 partitions" in log
    assert "mybackend_fallback_report graph0.inference" in log
    assert "mybackend_partition_map graph0.inference" in log and "subgraph cluster_p0" in log
    assert log.count("compiled graph0.inference") == 1  # one handler, not two


def test_torch_logs_off_prints_nothing_of_ours() -> None:
    done = _run({})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mybackend_fallback_report" not in done.stderr


def test_mybackend_logs_names_channels() -> None:
    done = _run({"MYBACKEND_LOGS": "aot,fallback"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[mybackend.aot] compiled graph0.inference" in done.stderr
    assert "[mybackend.fallback] mybackend_fallback_report" in done.stderr
    assert "[mybackend.partition]" not in done.stderr


def _artifacts(trace_dir: Path) -> dict[str, str]:
    """Parses TORCH_TRACE's files: metadata JSON per line, payload lines after a tab."""
    artifacts: dict[str, str] = {}
    for path in trace_dir.iterdir():
        current: str | None = None
        for line in path.read_text().splitlines():
            if line.startswith("\t"):
                if current is not None:
                    artifacts[current] += line[1:] + "\n"
                continue
            record = json.loads(line[line.index("{") :])
            artifact = record.get("artifact")
            current = artifact["name"] if artifact else None
            if current is not None:
                artifacts[current] = ""
    return artifacts


def test_torch_trace_has_partition_map_and_fallback_report(tmp_path: Path) -> None:
    script = tmp_path / "model.py"  # a file, so nodes carry a source line
    script.write_text(MODEL)
    trace_dir = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "MYBACKEND_LOGS")}
    env["TORCH_TRACE"] = str(trace_dir)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    artifacts = _artifacts(trace_dir)
    report = json.loads(artifacts["mybackend_fallback_report_graph0.inference"])
    assert report["compiled"] is True and report["partitions"] == 2
    assert report["fallback_nodes"][0]["op"] == "aten::cumsum.default"
    assert "model.py:5: y = torch.cumsum(y, 0)" in report["fallback_nodes"][0]["source"]
    dot = artifacts["mybackend_partition_map_graph0.inference"]
    assert dot.startswith('digraph "graph0.inference"') and "cluster_p1" in dot


def test_set_logs_modules_turns_on_the_component() -> None:
    done = _run(
        {},
        "import logging, torch, mybackend\n"
        "torch._logging.set_logs(modules={'mybackend': logging.DEBUG})\n" + MODEL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiled graph0.inference" in done.stderr
