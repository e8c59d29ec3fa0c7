"""PNG charts of a run: speedup per model and backend, and compile time.

matplotlib is optional: without it ``write_charts`` writes nothing and returns
a note saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.results import Result, Run


def _grouped_bars(ax: Any, labels: Sequence[str], series: dict[str, list[float]]) -> None:
    """One group of bars per label, one bar per series entry (0 where missing)."""
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, values, width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=7)


def _row_label(r: Result) -> str:
    return f"{r.model} b{r.batch}"


def _long_label(r: Result) -> str:
    return f"{r.model} {r.scenario[:5]} b{r.batch}"


def _series(
    results: Sequence[Result],
    labels: list[str],
    backends: list[str],
    field: str,
    label: Callable[[Result], str] = _row_label,
) -> dict[str, list[float]]:
    """Per backend, ``field`` of each labelled row (0 where absent or not measured)."""
    index = {(label(r), r.backend): r for r in results}
    out: dict[str, list[float]] = {}
    for b in backends:
        values = [getattr(index.get((lab, b)), field, None) for lab in labels]
        out[b] = [float(v) if v is not None else 0.0 for v in values]
    return out


def _speedup_chart(plt: Any, run: Run, path: Path) -> bool:
    scenarios = [s for s in ("inference", "training") if any(r.scenario == s for r in run.results)]
    backends = list(dict.fromkeys(r.backend for r in run.results if r.backend != "eager"))
    if not scenarios or not backends:
        return False
    fig, axes = plt.subplots(len(scenarios), 1, figsize=(10, 4 * len(scenarios)), squeeze=False)
    for ax, scenario in zip(axes[:, 0], scenarios, strict=True):
        rows = [r for r in run.results if r.scenario == scenario]
        labels = list(dict.fromkeys(_row_label(r) for r in rows))
        _grouped_bars(ax, labels, _series(rows, labels, backends, "speedup"))
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("speedup over eager (x)")
        ax.set_title(f"{scenario}: eager time / backend time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _compile_chart(plt: Any, run: Run, path: Path) -> bool:
    backends = list(dict.fromkeys(r.backend for r in run.results if r.backend != "eager"))
    if not backends:
        return False
    labels = list(dict.fromkeys(_long_label(r) for r in run.results))
    panels = [
        (field, title)
        for field, title in (
            ("first_call_s", "first call (compile), this process"),
            ("warm_first_call_s", "first call, fresh process with a warm cache"),
        )
        if any(getattr(r, field) is not None for r in run.results if r.backend != "eager")
    ]
    if not panels:
        return False
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 4 * len(panels)), squeeze=False)
    for ax, (field, title) in zip(axes[:, 0], panels, strict=True):
        _grouped_bars(ax, labels, _series(run.results, labels, backends, field, _long_label))
        ax.set_ylabel("seconds")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_charts(run: Run, out_dir: Path) -> list[str]:
    """Writes speedup.png and compile_time.png; returns notes about what was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["matplotlib is not installed: charts skipped"]
    notes = []
    if not _speedup_chart(plt, run, out_dir / "speedup.png"):
        notes.append("speedup chart skipped: no compiled backend was measured")
    if not _compile_chart(plt, run, out_dir / "compile_time.png"):
        notes.append("compile-time chart skipped: no compiled backend was measured")
    return notes
