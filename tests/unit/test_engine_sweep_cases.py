"""The engine sweep's case list and report, on the CPU (issue 32).

tests/gpu/test_engine_sweep.py runs one case per pattern, dtype, mode and
phase on the GPU; these tests keep its list whole without one: every engine
the C++ runtime counts (a ``*_groups_run`` or ``generated_*_run`` key of
``CompiledGraph.stats()``: one per kernel kind but ATen sequences) has
cases, so a new engine without sweep cases fails here; and
benchmarks/engine_sweep.py turns outcomes into docs/op-sweep.md's table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from benchmarks import engine_sweep as report
from tests.gpu import test_engine_sweep as sweep
from tests.testing import compiled_records

ROOT = Path(__file__).resolve().parents[2]
# Counters of several engines or none: kernel groups of any kind, generated kernels of any kind.
NOT_ENGINES = {"kernel_groups_run", "generated_kernels_run"}


def _runtime_stats_keys() -> set[str]:
    compiled = torch.compile(lambda x: torch.relu(x) + 1, backend="mybackend")
    _, records = compiled_records(lambda: compiled(torch.randn(4, 4)))
    (record,) = [r for r in records if r.compiled is not None]
    return set(record.compiled.stats())


def test_every_engine_the_runtime_counts_has_sweep_cases() -> None:
    keys = _runtime_stats_keys()
    counters = {
        k for k in keys if re.fullmatch(r"generated_\w+_run|\w+_groups_run", k)
    } - NOT_ENGINES
    assert counters == set(sweep.ENGINES.values()), (
        "the runtime's run counters and the sweep's ENGINES differ: add the new engine to "
        f"ENGINES and give it cases in PATTERNS ({sorted(counters ^ set(sweep.ENGINES.values()))})"
    )
    assert (
        set(sweep.FALLBACKS.values()) | {"generated_kernel_fallbacks", "cuda_graph_replays"} <= keys
    )


def test_every_engine_has_cases_in_every_mode_and_phase() -> None:
    for engine in sweep.ENGINES:
        cases = [c for c in sweep.CASES.values() if c.engine == engine]
        assert cases, f"no sweep case for engine {engine}"
        assert {p for c in cases for p in c.phases} == set(sweep.PHASES), engine
    assert {c.engine for c in sweep.PATTERNS} <= set(sweep.ENGINES)
    params = sweep.params()
    per_phase = len(sweep.DTYPES) * len(sweep.MODES)
    assert len({p.id for p in params}) == len(params)
    assert len(params) == sum(per_phase * len(c.phases) for c in sweep.PATTERNS)
    assert len(sweep.CASES) == len(sweep.PATTERNS), "two patterns share a name"


def test_selectors_and_markers_name_real_dtypes_modes_and_phases() -> None:
    axes = {*sweep.DTYPES, *sweep.MODES, *sweep.PHASES}
    for case in sweep.PATTERNS:
        for selector, reason in case.unclaimed:
            assert set(selector.split("/")) <= axes and reason, (case.name, selector)
        assert set(case.markers) <= set(case.phases), case.name
        for arg in case.args:
            assert arg.role in ("data", "weight", "buffer", "target"), (case.name, arg)
    sdpa = sweep.CASES["attention/sdpa"]
    assert sdpa.unclaimed_reason("fp32", "default", "train") is not None
    assert sdpa.unclaimed_reason("bf16", "default", "train") is None


def _result(name: str, dtype: str, mode: str, phase: str, outcome: str, reason: str = "") -> Any:
    nodeid = f"{report.ENGINE_SWEEP}::test_engine_sweep[{name}-{dtype}-{mode}-{phase}]"
    params = {"name": name, "dtype_name": dtype, "mode": mode, "phase": phase}
    return report.Result(nodeid, outcome, reason, params)


def test_the_report_marks_pass_failure_not_exercised_and_not_run() -> None:
    results = [
        _result("matmul/bmm", "fp32", "default", "forward", "passed"),
        _result("matmul/bmm", "fp32", "default", "train", "failed", "call: not exercised: x"),
        _result("attention/sdpa", "fp32", "default", "forward", "skipped", "not exercised: fp32"),
        _result("matmul/bmm", "bf16", "default", "forward", "skipped", "could not import 'x'"),
        report.Result("tests/gpu/test_op_sweep.py::test_a", "failed", "call: mismatch"),
    ]
    text = report.section(results, report.FILES, len(sweep.params()))
    assert text.startswith(report.BEGIN) and text.rstrip().endswith(report.END)
    bmm = next(line for line in text.splitlines() if line.startswith("| bmm |"))
    cells = [c.strip() for c in bmm.strip("|").split("|")][1:]
    assert cells[:5] == ["pass", "**FAIL** (n.e.)", "not run", "not run", "**FAIL**"], cells
    decomposed = next(line for line in text.splitlines() if "| decomposed_inference |" in line)
    assert "—" in decomposed  # no train case
    assert "n.e." in next(line for line in text.splitlines() if line.startswith("| sdpa |"))
    assert "could not import 'x'" in text and "call: mismatch" in text
    assert f"{len(sweep.params()) - 4} of {len(sweep.params())} cases not run" in text


def test_publish_replaces_only_the_generated_section(tmp_path: Path) -> None:
    doc = tmp_path / "op-sweep.md"
    doc.write_text(f"# Title\n\nbefore\n\n{report.BEGIN}\nold\n{report.END}\n\nafter\n")
    report.publish(f"{report.BEGIN}\nnew\n{report.END}\n", doc)
    assert doc.read_text() == f"# Title\n\nbefore\n\n{report.BEGIN}\nnew\n{report.END}\n\nafter\n"


def test_the_doc_has_a_generated_section() -> None:
    text = (ROOT / report.DOC).read_text()
    assert text.count(report.BEGIN) == 1 and text.index(report.BEGIN) < text.index(report.END)
