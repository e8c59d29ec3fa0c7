"""Compile-time breakdown: torch's stage timers and mybackend's, per call."""

from __future__ import annotations

import json

import torch

import mybackend
from mybackend import compile_times
from mybackend.reports import GraphRecord
from tests.testing import compiled_records


def _record(kind: str, stage_times: list[tuple[str, float]]) -> GraphRecord:
    return GraphRecord(f"graph0.{kind}", kind, "", None, stage_times)


def test_breakdown_splits_aot_and_mybackend_and_adds_up_to_the_call() -> None:
    before = {"torch:_compile.compile_inner": 1.0, "mybackend:forward": 0.5}
    after = {
        "torch:_compile.compile_inner": 11.0,  # dynamo frame compile, backend included
        "torch:OutputGraph.call_user_compiler": 6.0,  # the backend call
        "torch:create_aot_dispatcher_function": 5.5,
        "torch:aot_collect_metadata": 1.0,
        "torch:aot_trace_joint_graph": 2.0,
        compile_times.PARTITION: 1.5,
        "mybackend:forward": 0.75,  # +0.25 s inside aot_autograd
        "torch:backward._backward_impl": 0.5,
        "mybackend:backward": 0.25,
        compile_times.KERNEL_WAIT: 0.5,  # a run waited for background compiles
    }
    records = [
        _record("forward", [("lowering", 0.125), ("verify", 0.0625), ("codegen", 0.03125)]),
        _record("backward", [("lowering", 0.125), ("partition", 0.03125), ("runtime", 0.03125)]),
    ]
    stages = compile_times.breakdown(before, after, 20.0, records)
    assert stages == {
        "dynamo (bytecode tracing, guards)": 4.0,
        "aot_autograd metadata": 1.0,
        "aot_autograd joint trace (decompositions, functionalization)": 2.0,
        compile_times.PARTITION: 1.5,
        "aot_autograd other": 0.75,  # 5.5 - 1 - 2 - 1.5 - 0.25
        "aot_autograd lazy backward": 0.25,  # 0.5 - 0.25
        "mybackend lowering": 0.25,
        compile_times.CORE_PLANNING: 0.09375,  # verify 0.0625 + partition 0.03125
        compile_times.CORE_RUNTIME: 0.0625,  # codegen 0.03125 + runtime 0.03125
        "mybackend other (reports)": 0.09375,  # 0.25 + 0.25 - 0.25 - 0.09375 - 0.0625
        compile_times.KERNEL_WAIT: 0.5,
        "rest of the call": 9.5,
    }
    assert sum(stages.values()) == 20.0
    assert compile_times.format_breakdown(stages).startswith("compile time of the call: 20.000 s")


def test_training_step_times_the_partitioner_and_both_graph_compiles() -> None:
    w = torch.randn(8, 8, requires_grad=True)
    compiled = torch.compile(lambda x: torch.tanh(x @ w).sum(), backend="mybackend")
    before = compile_times.snapshot()
    _, records = compiled_records(lambda: compiled(torch.randn(4, 8)).backward())
    after = compile_times.snapshot()
    for key in (compile_times.PARTITION, "mybackend:forward", "mybackend:backward"):
        assert after.get(key, 0.0) > before.get(key, 0.0), key
    assert after["torch:aot_trace_joint_graph"] > before.get("torch:aot_trace_joint_graph", 0.0)
    stages = compile_times.breakdown(before, after, 100.0, records)
    assert stages["mybackend lowering"] > 0.0 and stages[compile_times.PARTITION] > 0.0


def test_explain_reports_the_stages_of_the_explained_call() -> None:
    report = mybackend.explain(lambda x: torch.relu(x) * 3 + 1, torch.randn(8))
    times = report.compile_times
    assert times["dynamo (bytecode tracing, guards)"] > 0.0
    assert times["mybackend lowering"] > 0.0 and "rest of the call" in times
    text = str(report)
    assert "compile time of the call:" in text and "mybackend lowering" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["compile_times"].keys() == times.keys()
