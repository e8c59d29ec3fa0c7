"""explain(): the report of what was compiled, what fell back and why."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

import mybackend
from mybackend.reports import GraphRecord
from tests.models.models import GraphBreaks


def _model_with_a_fallback(x: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x) * 2
    y = torch.cumsum(y, dim=0)  # not in the capability registry
    return torch.relu(y) + 1


def test_report_names_partitions_fallbacks_reasons_and_source_lines() -> None:
    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    assert len(report.graphs) == 1
    fallbacks = report.fallback_nodes()
    assert [f["op"] for f in fallbacks] == ["aten::cumsum.default"]
    assert "not in the capability registry" in fallbacks[0]["reason"]
    assert "test_explain.py" in fallbacks[0]["source"] and "cumsum" in fallbacks[0]["source"]
    text = str(report)
    assert "partition 0" in text and "aten_sequence" in text
    assert "compile time per stage: lowering" in text
    for stage in ("verify", "capability", "partition", "fusion", "runtime"):
        assert f"{stage} " in text
    data = report.to_dict()
    assert data["graphs"][0]["report"]["nodes"][0]["op"].startswith("aten::")


def test_forced_unsupported_op_is_reported_with_its_option() -> None:
    report = mybackend.explain(
        _model_with_a_fallback, torch.randn(8), options={"disabled_ops": ["aten::exp.default"]}
    )
    reasons = {f["op"]: f["reason"] for f in report.fallback_nodes()}
    assert "disabled by option disabled_ops" in reasons["aten::exp.default"]


def test_graph_breaks_are_counted() -> None:
    report = mybackend.explain(GraphBreaks(), torch.randn(4, 16))
    assert report.graph_breaks >= 1
    assert f"{report.graph_breaks} graph break(s)" in str(report)


def test_graph_that_failed_to_compile_says_so(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mybackend.aot

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(mybackend.aot, "lower", broken)
    with pytest.warns(UserWarning, match="injected failure"):
        report = mybackend.explain(lambda x: x + 1, torch.randn(2))
    assert "runs eagerly: RuntimeError: injected failure" in str(report)


def test_dump_dir_writes_every_stage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = torch.compile(
        _model_with_a_fallback, backend="mybackend", options={"dump_dir": str(tmp_path)}
    )
    f(torch.randn(8))
    names = sorted(p.name for p in tmp_path.iterdir())
    for suffix in (
        "aten.py",
        "ir.txt",
        "plan.json",
        "kernels.txt",
        "partition_map.dot",
        "report.txt",
    ):
        assert any(n.endswith(suffix) for n in names), (suffix, names)
    ir = next(p for p in tmp_path.iterdir() if p.name.endswith(".ir.txt")).read_text()
    assert "aten::cumsum.default" in ir
    aten = next(p for p in tmp_path.iterdir() if p.name.endswith(".aten.py")).read_text()
    assert "torch.ops.aten.cumsum.default" in aten
    plan = json.loads(
        next(p for p in tmp_path.iterdir() if p.name.endswith(".plan.json")).read_text()
    )
    assert plan["partitions"] and plan["kernels"][0]["why"]


def test_dump_dir_from_environment(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MYBACKEND_DUMP_DIR", str(tmp_path))
    torch.compile(lambda x: x * 2, backend="mybackend")(torch.ones(2))
    assert any(p.name.endswith(".plan.json") for p in tmp_path.iterdir())


def test_html_report_is_a_table_with_fallbacks_and_escaped_text() -> None:
    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    page = report._repr_html_()
    assert page.startswith('<div class="mb-report">') and page.count("<table>") >= 3
    assert "<td>aten::cumsum.default</td>" in page
    assert "not in the capability registry" in page and "test_explain.py" in page
    assert "CUDA graphs: off" in page and "compile time per stage" in page
    assert "<th>nodes_run_in_partitions</th>" in page
    # HTML parses: every opened table closes.
    assert page.count("<table>") == page.count("</table>")


def test_to_dict_is_json_and_names_fallbacks_stats_and_cuda_graphs() -> None:
    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    data = json.loads(json.dumps(report.to_dict()))
    graph = data["graphs"][0]
    assert graph["fallback_nodes"][0]["op"] == "aten::cumsum.default"
    assert graph["cuda_graphs"].startswith("off")
    assert graph["stats"]["calls"] == 1 and graph["stats"]["nodes_run_in_partitions"] == 4
    assert [s for s, _ in graph["stage_times"]][:2] == ["lowering", "verify"]
    assert graph["accuracy"] == []


def test_kernel_sources_shown_on_request_when_the_core_gives_them() -> None:
    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    assert "no generated source" in report.format(sources=True)
    assert "no generated source" not in str(report)
    core = report.graphs[0].core_report
    assert core is not None
    core["kernels"][0]["spec"] = 'PointwiseSpec{exp, mul}\nextern "C" __global__ void k() {}'
    text = report.format(sources=True)
    assert "PointwiseSpec{exp, mul}" in text and "__global__" in text
    assert "PointwiseSpec" in report.kernel_sources()
    assert "<td>yes</td>" in report._repr_html_()


def test_partition_map_dot_colours_partitions_and_marks_fallbacks() -> None:
    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    pmap = report.partition_map()
    assert pmap.dot == report.partition_maps()[0].dot
    dot = pmap.dot
    assert dot.startswith(f'digraph "{report.graphs[0].name}"')
    assert dot.count("subgraph cluster_p") == 2
    assert '"cumsum" [label=' in dot and "fallback: operator aten::cumsum.default" in dot
    assert '"mul" -> "cumsum";' in dot and '"cumsum" -> "relu";' in dot
    assert dot.rstrip().endswith("}") and dot.count("{") == dot.count("}")


def test_partition_map_renders_svg_through_dot_or_says_how(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from mybackend.debug import partition_map as pm

    report = mybackend.explain(_model_with_a_fallback, torch.randn(8))
    pmap = report.partition_map(report.graphs[0].name)
    monkeypatch.setitem(sys.modules, "graphviz", None)  # force the `dot` binary path
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pm.RenderError, match="needs graphviz"):
        pmap.svg()
    assert pmap._repr_svg_() is None
    assert "<pre>digraph" in pmap._repr_html_()
    fake_dot = tmp_path / "dot"  # echoes an SVG wrapping the DOT it was given
    fake_dot.write_text(
        f"#!{sys.executable}\nimport sys\nd = sys.stdin.read()\n"
        "print('<svg xmlns=\"http://www.w3.org/2000/svg\"><!--' + "
        "str(len(d)) + '--></svg>')\n"
    )
    fake_dot.chmod(0o755)
    svg = pmap.svg()
    assert svg.startswith("<svg") and str(len(pmap.dot)) in svg
    assert pmap._repr_svg_() == svg and "<svg" in pmap._repr_html_()


def test_bad_graph_key_is_a_clear_error() -> None:
    report = mybackend.explain(lambda x: x + 1, torch.randn(2))
    with pytest.raises(KeyError, match="no graph named 'nope'; graphs: graph"):
        report.partition_map("nope")
    with pytest.raises(IndexError, match="out of range"):
        report.partition_map(5)


def test_a_records_core_report_is_made_on_first_use_only() -> None:
    # Note [Kernels compiled beside the caller]: making the report waits for
    # the graph's kernels, so a compile hands the record a function instead.
    calls: list[int] = []

    def make() -> dict[str, Any]:
        calls.append(1)
        return {"partitions": [], "nodes": [], "kernels": []}

    record = GraphRecord("graph0.forward", "forward", "", make, [])
    assert record.has_core_report and calls == []
    assert record.core_report == {"partitions": [], "nodes": [], "kernels": []}
    assert record.core_report is record.core_report
    assert calls == [1]
    assert not GraphRecord("graph0.forward", "forward", "", None, []).has_core_report
