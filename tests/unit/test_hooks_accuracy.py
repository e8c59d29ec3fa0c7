"""accuracy_check: partitions against eager ATen, flagging a wrong kernel."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import mybackend
from mybackend.hooks import accuracy


def _model(x: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x) * 2
    y = torch.cumsum(y, dim=0)  # outside partitions: splits the graph in two
    return torch.relu(y) + 1


def test_off_by_default() -> None:
    report = mybackend.explain(_model, torch.randn(8))
    assert report.accuracy() == [] and "accuracy check" not in str(report)


def test_correct_partitions_pass() -> None:
    report = mybackend.explain(_model, torch.randn(8), options={"accuracy_check": True})
    results = report.accuracy()
    assert [r["partition"] for r in results] == [0, 1]
    assert results[0]["nodes"] == ["exp", "mul"] and results[1]["nodes"] == ["relu", "add"]
    assert all(not r["exceeded"] and r["max_rel_error"] == 0.0 for r in results)
    assert results[0]["rtol"] == 1.3e-06 and results[0]["dtype"] == "torch.float32"
    assert "partition 0: 0 (tol 1.3e-06, torch.float32) ok" in str(report)


def test_injected_wrong_kernel_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    real = accuracy.run_in_core

    def wrong_exp_kernel(sub: torch.fx.GraphModule, inputs: list[Any], options: Any) -> list[Any]:
        outputs = real(sub, inputs, options)
        if any(n.target is torch.ops.aten.exp.default for n in sub.graph.nodes):
            outputs[0] = outputs[0] * 1.01  # the exp kernel is 1% off
        return outputs

    monkeypatch.setattr(accuracy, "run_in_core", wrong_exp_kernel)
    with pytest.warns(UserWarning, match=r"partition 0 differs from eager.*exp, mul"):
        report = mybackend.explain(_model, torch.randn(8), options={"accuracy_check": True})
    bad, good = report.accuracy()
    assert bad["exceeded"] and bad["worst_node"] == "exp"
    assert bad["max_rel_error"] > 100 * bad["rtol"]
    assert not good["exceeded"]
    assert "EXCEEDED" in str(report) and "mb-bad" in report._repr_html_()


def test_half_precision_uses_its_tolerance_and_training_graphs_are_checked() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    report = mybackend.explain(model, torch.randn(4, 8), options={"accuracy_check": True})
    results = report.accuracy()
    assert results and all("error" not in r for r in results), results
    assert all(not r["exceeded"] for r in results)
    assert accuracy.relative_error(torch.ones(3, dtype=torch.float16) * 1.0005,
                                   torch.ones(3, dtype=torch.float16))[1] == 1e-3  # fmt: skip


def test_relative_error_matches_allclose() -> None:
    expected = torch.tensor([1.0, 100.0, 0.0, float("nan")])
    close = expected + torch.tensor([1e-7, 1e-4, 1e-6, 0.0])
    far = expected + torch.tensor([0.0, 1.0, 0.0, 0.0])
    error, rtol = accuracy.relative_error(close, expected)
    assert error <= rtol and torch.allclose(close, expected, 1.3e-6, 1e-5, equal_nan=True)
    error, rtol = accuracy.relative_error(far, expected)
    assert error > rtol
    assert accuracy.relative_error(torch.tensor([1, 2]), torch.tensor([1, 3]))[0] == float("inf")
    assert accuracy.relative_error(torch.ones(2), torch.ones(3))[0] == float("inf")
