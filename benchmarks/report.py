"""Markdown tables of a run (results.md), and merging runs.

Three summary tables come first: speedup over eager per scenario (the layout of
docs/reference-figures.md, with a geometric-mean row), then compile
times. Then one detail row per (model, scenario, batch, backend) with every
metric. ``python -m benchmarks.report DIR... --out DIR`` merges the
results.json of several runs (e.g. one per device call) into one report.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from benchmarks.common import geomean
from benchmarks.results import Result, Run

SCENARIO_TITLES = {
    "inference": "Inference, weights and inputs in {dtype}, torch.no_grad",
    "training": "Training step: {amp}{optimizer}, loss.backward(), optimizer.step()",
}
T = TypeVar("T")
TIMES = "\u00d7"  # the multiplication sign of "1.82x" speedups
FAILED_MARK = "\u2717"  # a ballot x: the result failed the accuracy check
DETAIL_COLUMNS = (
    "model",
    "scenario",
    "batch",
    "backend",
    "median ms",
    "IQR ms",
    "min-max ms",
    "speedup",
    "first call s",
    "warm first call s",
    "peak MiB",
    "accurate",
    "cosine",
    "rel err",
    "graphs",
    "breaks",
    "recompiles",
    "status",
)


def fmt(value: float | int | None, digits: int = 2) -> str:
    """A number for a table cell; '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub markdown table; cells may not contain '|' (it is escaped)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    out = [line(header), "|" + "---|" * len(header)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def speedup_cell(r: Result | None) -> str:
    """'1.82x' (with TIMES), FAILED_MARK appended when inaccurate; else the status."""
    if r is None:
        return "-"
    if r.status != "ok":
        return r.status
    if r.speedup is None:
        return "-"
    return f"{r.speedup:.2f}{TIMES}" + ("" if r.accurate else f" {FAILED_MARK}")


def _ordered(values: Iterable[T]) -> list[T]:
    """The distinct values in first-seen order."""
    return list(dict.fromkeys(values))


def _rows(results: Sequence[Result], scenario: str) -> list[tuple[str, str, int]]:
    return _ordered(r.row_key for r in results if r.scenario == scenario)


def speedup_table(results: Sequence[Result], scenario: str) -> str:
    """model | batch | eager ms | one speedup column per compiled backend."""
    index = {r.key: r for r in results}
    backends = [b for b in _ordered(r.backend for r in results) if b != "eager"]
    header = ["model", "batch", "eager ms", *backends]
    body = []
    for model, scen, batch in _rows(results, scenario):
        eager = index.get((model, scen, batch, "eager"))
        cells = [speedup_cell(index.get((model, scen, batch, b))) for b in backends]
        body.append([model, str(batch), fmt(eager.median_ms if eager else None), *cells])
    means = []
    for b in backends:
        values = [
            r.speedup
            for r in results
            if r.backend == b and r.scenario == scenario and r.speedup is not None
        ]
        mean = geomean(values)
        means.append(f"{mean:.2f}{TIMES}" if mean else "-")
    body.append(["geometric mean", "", "", *means])
    return markdown_table(header, body)


def compile_table(results: Sequence[Result]) -> str:
    """First call seconds (this process / fresh process, warm cache) per backend."""
    index = {r.key: r for r in results}
    backends = [b for b in _ordered(r.backend for r in results) if b != "eager"]
    header = ["model", "scenario", "batch", *backends]
    body = []
    for model, scen, batch in _ordered(r.row_key for r in results):
        cells = []
        for b in backends:
            r = index.get((model, scen, batch, b))
            ok = r is not None and r.status == "ok"
            cells.append(
                f"{fmt(r.first_call_s, 1)} / {fmt(r.warm_first_call_s, 1)}" if ok and r else "-"
            )
        body.append([model, scen, str(batch), *cells])
    return markdown_table(header, body)


def detail_row(r: Result) -> list[str]:
    """Every metric of one Result as table cells (see DETAIL_COLUMNS)."""
    iqr = f"{fmt(r.p25_ms, 3)}-{fmt(r.p75_ms, 3)}" if r.p25_ms is not None else "-"
    span = f"{fmt(r.min_ms, 3)}-{fmt(r.max_ms, 3)}" if r.min_ms is not None else "-"
    accurate = "-" if r.accurate is None else ("pass" if r.accurate else "FAIL")
    status = r.status if r.status == "ok" else f"{r.status}: {r.error[:80]}"
    if r.warnings:
        status += f" ({len(r.warnings)} warning{'s' if len(r.warnings) > 1 else ''})"
    return [
        r.model,
        r.scenario,
        str(r.batch),
        r.backend,
        fmt(r.median_ms, 3),
        iqr,
        span,
        fmt(r.speedup),
        fmt(r.first_call_s),
        fmt(r.warm_first_call_s),
        fmt(r.peak_mib, 0),
        accurate,
        fmt(r.cosine, 5),
        "-" if r.rel_error is None else f"{r.rel_error:.1e}",
        fmt(r.graphs),
        fmt(r.graph_breaks),
        fmt(r.recompiles),
        status.replace("\n", " "),
    ]


def detail_table(results: Sequence[Result]) -> str:
    return markdown_table(DETAIL_COLUMNS, [detail_row(r) for r in results])


def _precision_words(run: Run) -> tuple[str, str]:
    dtype = str(run.meta.get("dtype", "float32"))
    if dtype == "float32":
        return "fp32", ""
    short = {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
    return short, f"autocast {short}, "


def header_lines(run: Run) -> list[str]:
    """The lines saying where, when and how the figures were measured."""
    m = run.meta
    where = m.get("gpu") or f"CPU ({m.get('cpu_count')} cores)"
    lines = [
        f"Measured {m.get('date_utc', '?')} UTC on {where}; torch {m.get('torch')}, "
        f"Python {m.get('python')}, dtype {m.get('dtype')}, commit {m.get('git_commit')}.",
        f"Command: `{m.get('command', '?')}`",
    ]
    if m.get("quick"):
        lines.append(
            "Quick run: tiny models on the CPU in fp32 (no autocast); "
            "the accuracy reference is fp64. Smoke test, not figures."
        )
    if run.ceilings:
        c = run.ceilings
        lines.append(
            f"Device ceilings: copy {fmt(c.get('copy_tbps'))} TB/s (read + write); "
            f"bf16 matmul 8192^3 {fmt(c.get('matmul_tflops'), 0)} TFLOP/s."
        )
    return lines


def summary_markdown(run: Run) -> str:
    """The speedup tables and the compile-time table."""
    from benchmarks.zoo import ZOO

    short, amp = _precision_words(run)
    zoo = any(r.model in ZOO for r in run.results)
    optimizer = "Adam (AdamW for zoo models)" if zoo else "Adam"
    parts = []
    for scenario, title in SCENARIO_TITLES.items():
        if any(r.scenario == scenario for r in run.results):
            heading = title.format(dtype=short, amp=amp, optimizer=optimizer)
            parts += [
                f"## {heading}",
                "",
                "Speedup = eager ms / backend ms "
                f"(median of repeats, same process); {FAILED_MARK} = failed the accuracy check.",
                "",
                speedup_table(run.results, scenario),
                "",
            ]
    parts += [
        "## Compile time: first call s (this process) / first call s (fresh process, warm cache)",
        "",
        compile_table(run.results),
        "",
    ]
    return "\n".join(parts)


def warnings_section(results: Sequence[Result]) -> list[str]:
    """A list of the warnings each backend raised while compiling, if any did."""
    lines = [
        f"- {r.model} {r.scenario} b{r.batch} {r.backend}: {w}" for r in results for w in r.warnings
    ]
    return ["## Warnings while compiling and checking", "", *lines, ""] if lines else []


def render(run: Run) -> str:
    """The whole results.md."""
    return "\n".join(
        [
            "# Benchmark results",
            "",
            *header_lines(run),
            "",
            summary_markdown(run),
            "## All measurements",
            "",
            detail_table(run.results),
            "",
            *warnings_section(run.results),
        ]
    )


def terminal_text(run: Run) -> str:
    """What the CLI prints: the detail table, then the summaries last."""
    return "\n".join([detail_table(run.results), "", *header_lines(run), "", summary_markdown(run)])


def write_outputs(run: Run, out_dir: Path) -> list[str]:
    """results.json, results.md and the charts; returns notes (e.g. charts skipped)."""
    from benchmarks.charts import write_charts

    out_dir.mkdir(parents=True, exist_ok=True)
    run.save(out_dir / "results.json")
    (out_dir / "results.md").write_text(render(run))
    return write_charts(run, out_dir)


def main(argv: list[str] | None = None) -> int:
    """Merges the results.json of several output folders into one report."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=main.__doc__)
    parser.add_argument("dirs", nargs="+", type=Path, help="folders holding results.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for the merged report")
    args = parser.parse_args(argv)
    run = Run()
    for folder in args.dirs:
        run = run.merged(Run.load(folder / "results.json"))
    for note in write_outputs(run, args.out):
        print(note)
    print(terminal_text(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
