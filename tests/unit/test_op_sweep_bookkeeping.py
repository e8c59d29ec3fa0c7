"""CPU checks of the OpInfo sweep's bookkeeping (tests/op_sweep.py), which
tests/gpu/test_op_sweep.py relies on to call a case exercised or not."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from mybackend import _C
from mybackend.decompositions import decomposition_table
from tests.op_sweep import (
    Case,
    SweepLog,
    decomposed_overloads,
    generated_ops,
    match_opinfos,
    opinfo_id,
    opinfo_names_for,
    overload_name,
    packet_of,
    why_not_generated,
)


def _info(name: str, variant: str = "") -> Any:
    return types.SimpleNamespace(name=name, variant_test_name=variant)


def test_names() -> None:
    assert packet_of("aten::div.Tensor_mode") == "div"
    assert opinfo_names_for("aten::relu.default") == ("relu", "nn.functional.relu", "special.relu")
    assert opinfo_names_for("aten::_to_copy.default") == ("to",)
    assert opinfo_names_for("prims::convert_element_type.default") == ()
    assert opinfo_id(_info("div", "floor_rounding")) == "div.floor_rounding"
    assert opinfo_id(_info("exp")) == "exp"
    assert overload_name(torch.ops.aten.add.Scalar) == "aten::add.Scalar"
    assert overload_name(torch.ops.prims.convert_element_type.default) == (
        "prims::convert_element_type.default"
    )


def test_matching_prefers_the_plain_name_and_keeps_every_variant() -> None:
    infos = [_info("div", "trunc_rounding"), _info("div", "floor_rounding"), _info("gelu_x"),
             _info("nn.functional.gelu"), _info("relu"), _info("nn.functional.relu")]  # fmt: skip
    matched = match_opinfos(
        ["aten::div.Tensor_mode", "aten::gelu.default", "aten::relu.default", "aten::erf.default"],
        infos,
    )
    assert [opinfo_id(i) for i in matched["aten::div.Tensor_mode"]] == [
        "div.trunc_rounding",
        "div.floor_rounding",
    ]
    assert [i.name for i in matched["aten::gelu.default"]] == ["nn.functional.gelu"]
    assert [i.name for i in matched["aten::relu.default"]] == ["relu"]
    assert matched["aten::erf.default"] == []


def test_the_real_table_and_op_db() -> None:
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    table = _C.generated_pointwise_ops()
    assert table == sorted(table) and "aten::add.Tensor" in table
    for name in table:  # every entry is a real overload
        namespace, rest = name.split("::")
        packet, overload = rest.split(".")
        assert overload_name(getattr(getattr(getattr(torch.ops, namespace), packet), overload))
    matched = match_opinfos(table, op_db)
    ids = {o: {opinfo_id(i) for i in infos} for o, infos in matched.items()}
    assert {"div.trunc_rounding", "div.floor_rounding"} <= ids["aten::div.Tensor_mode"]
    assert ids["aten::gelu.default"] == {"nn.functional.gelu"}
    assert ids["aten::_to_copy.default"] == {"to"}
    assert ids["aten::sigmoid_backward.default"] == set()
    # Most of the table has an OpInfo: a renamed OpInfo shows up here.
    assert sum(bool(v) for v in ids.values()) >= len(table) * 3 // 4, ids
    unreachable = decomposed_overloads(table, decomposition_table())
    assert "aten::rsub.Scalar" in unreachable and "aten::add.Tensor" not in unreachable


# --- classification -------------------------------------------------------


def _record(
    kernels: list[dict[str, Any]],
    ops: list[str],
    run: int,
    fallbacks: int = 0,
) -> Any:
    stats = {"generated_kernels_run": run, "generated_kernel_fallbacks": fallbacks}
    report = {"nodes": [{"id": i, "op": op} for i, op in enumerate(ops)], "kernels": kernels}
    compiled = types.SimpleNamespace(stats=lambda: stats)
    return types.SimpleNamespace(core_report=report, compiled=compiled, fallback_reason=None)


def _group(nodes: list[int], compiled: bool | None, problem: str = "", why: str = "") -> Any:
    group = {"kind": "pointwise", "nodes": nodes, "why": why}
    if compiled is not None:
        group.update(compiled=compiled, problem=problem)
    return group


EXP, MUL = "aten::exp.default", "aten::mul.Tensor"


def test_generated_ops_credits_only_graphs_whose_groups_all_ran() -> None:
    ran = _record([_group([0, 1], True)], [MUL, EXP], run=1)
    assert generated_ops([ran]) == {MUL, EXP}
    # Planned but not compiled (opt-in off, NVRTC failure, no CUDA build).
    assert generated_ops([_record([_group([0], False, "NVRTC failed")], [EXP], run=0)]) == set()
    # Planned as ATen calls (min_fused_nodes not met): no "compiled" key.
    aten = _record([{"kind": "aten", "nodes": [0], "why": "1 node"}], [EXP], run=0)
    assert generated_ops([aten]) == set()
    # Compiled, but a group ran its ATen form on this call.
    assert generated_ops([_record([_group([0], True)], [EXP], run=0, fallbacks=1)]) == set()
    # Two groups, one launch: not all of them ran generated.
    two = _record([_group([0], True), _group([1], True)], [EXP, MUL], run=1)
    assert generated_ops([two]) == set()
    # A graph that fell back to eager contributes nothing; others still count.
    eager = types.SimpleNamespace(core_report=None, compiled=None, fallback_reason="boom")
    assert generated_ops([eager, ran]) == {MUL, EXP}


def test_why_not_names_the_reports_reason() -> None:
    not_compiled = _record([_group([0], False, "NVRTC failed: x")], [EXP], run=0)
    assert why_not_generated([not_compiled], [EXP]) == "NVRTC failed: x"
    aten = _record([{"kind": "aten", "nodes": [0], "why": "fewer than 2 nodes"}], [EXP], run=0)
    assert why_not_generated([aten], [EXP]) == "fewer than 2 nodes"
    assert why_not_generated([aten], [MUL]) == "the graph has no kernel group for the op"
    eager = types.SimpleNamespace(core_report=None, compiled=None, fallback_reason="boom")
    assert why_not_generated([eager], [EXP]) == "graph not compiled: boom"


def test_cases_and_the_never_exercised_rule() -> None:
    add_t, add_s, rsub = "aten::add.Tensor", "aten::add.Scalar", "aten::rsub.Scalar"
    matched = {add_t: ["add"], add_s: ["add"], rsub: ["rsub"], EXP: ["exp"], MUL: []}
    log = SweepLog()
    log.cases += [
        Case("add", "sample 0", "float32", (add_t, add_s), ran_generated={add_t}),
        Case("add", "direct aten::add.Scalar sample 0", "float32", (add_s,), ran_generated=set()),
        Case("rsub", "sample 0", "float32", (), ran_generated={"aten::sub.Tensor"}),
        Case("exp", "sample 0", "float32", (EXP,), ran_generated={EXP}, error="mismatch"),
    ]
    assert [c.exercised for c in log.cases] == [True, False, True, True]
    assert [c.label for c in log.not_exercised()] == ["direct aten::add.Scalar sample 0"]
    assert [c.opinfo for c in log.failures()] == ["exp"]
    # Nothing finished yet: no verdict on any overload.
    assert log.never_exercised(matched, {rsub}) == []
    log.finished_opinfos |= {"add", "rsub", "exp"}
    # add.Scalar never ran; exp only ran in a failed case; rsub is decomposed;
    # mul has no OpInfo.
    assert log.never_exercised(matched, {rsub}) == [add_s, EXP]
    text = log.summary(matched, {rsub})
    assert "4 cases, 1 failed, 1 not exercised" in text
    assert f"never exercised: {add_s}, {EXP}" in text
    assert f"decomposed before lowering: {rsub}" in text
    assert f"no OpInfo: {MUL}" in text
    assert "FAILED: exp [float32] sample 0: mismatch" in text
