"""accuracy_check: each compiled partition against its eager ATen nodes.

On a compiled graph's first call, the ATen graph runs once eagerly under an
``fx.Interpreter`` that records every node's value. Each partition of the
core's report (its node names are the FX names) is cut out as an FX subgraph
whose inputs are the values flowing into it and whose outputs are every
tensor it computes; the subgraph is lowered and compiled by the core on its
own, run on the recorded real inputs, and each output compared with the
recorded eager value. Per partition the worst relative error
``|actual - expected| / (|expected| + atol / rtol)`` is reported with the
dtype's ``rtol``; it exceeds the tolerance exactly when ``torch.allclose``
with that (rtol, atol) would fail.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from mybackend import _C
from mybackend._logging import get_logger, warn_once
from mybackend.lowering import lower
from mybackend.options import Options

log = get_logger("runtime")

# dtype -> (rtol, atol), torch.testing.assert_close's defaults.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


class _Recorder(torch.fx.Interpreter):
    """Runs a graph eagerly and keeps a copy of every node's value."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n.name] = _copy(result)
        return result


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list | tuple):
        return type(value)(_copy(v) for v in value)
    return value


def record_values(gm: torch.fx.GraphModule, inputs: list[Any]) -> dict[str, Any]:
    """Every node's value (by FX name) of one eager run on copies of ``inputs``."""
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*[_copy(v) for v in inputs])
    return recorder.values


def partition_module(
    gm: torch.fx.GraphModule, names: set[str], values: dict[str, Any]
) -> tuple[torch.fx.GraphModule, list[str], list[str]]:
    """The FX subgraph of the nodes named ``names`` (and getitems of them).

    Returns it with the names of the values it reads and of those it returns.
    """
    inside = {n for n in gm.graph.nodes if n.name in names}
    for node in gm.graph.nodes:
        if node.target is operator.getitem and node.args[0] in inside:
            inside.add(node)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    inputs: list[str] = []

    def outer(node: torch.fx.Node) -> torch.fx.Node:
        if node not in env:
            placeholder = graph.placeholder(node.name)
            placeholder.meta = dict(node.meta)
            env[node] = placeholder
            inputs.append(node.name)
        return env[node]

    ordered = [n for n in gm.graph.nodes if n in inside]
    for node in ordered:
        env[node] = graph.node_copy(node, outer)
    outputs = [n.name for n in ordered if isinstance(values.get(n.name), torch.Tensor)]
    by_name = {n.name: n for n in ordered}
    graph.output(tuple(env[by_name[name]] for name in outputs))
    return torch.fx.GraphModule(gm, graph), inputs, outputs


def run_in_core(sub: torch.fx.GraphModule, inputs: list[Any], options: Options) -> list[Any]:
    """Lowers and compiles a partition's subgraph with the core and runs it once."""
    lowered = lower(sub, inputs)
    core = _C.compile(lowered.graph, options.core_options(), lowered.run_python_node)
    return list(core.run([_copy(v) for v in inputs] + lowered.constants))


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(worst relative error, rtol) of one output; see the module docstring."""
    if actual.shape != expected.shape:
        return float("inf"), 0.0
    if not (expected.is_floating_point() or expected.is_complex()):
        return (0.0 if torch.equal(actual, expected) else float("inf")), 0.0
    rtol, atol = TOLERANCES.get(expected.dtype, (1.3e-6, 1e-5))
    a, e = (
        actual.detach().to(torch.complex128 if expected.is_complex() else torch.float64),
        (expected.to(torch.complex128 if expected.is_complex() else torch.float64)),
    )
    both_nan = torch.isnan(a) & torch.isnan(e)
    error = ((a - e).abs() / (e.abs() + atol / rtol)).nan_to_num(nan=float("inf"))
    error = torch.where(both_nan, torch.zeros_like(error), error)
    return (float(error.max()) if error.numel() else 0.0), rtol


def check_partitions(
    gm: torch.fx.GraphModule, report: dict[str, Any], inputs: list[Any], options: Options
) -> list[dict[str, Any]]:
    """Compares every partition of ``report`` with eager ATen on ``inputs``."""
    values = record_values(gm, inputs)
    nodes = report["nodes"]
    results = []
    for index, members in enumerate(report["partitions"]):
        names = [nodes[m]["name"] for m in members]
        result: dict[str, Any] = {"partition": index, "nodes": names}
        try:
            result.update(_check_one(gm, set(names), values, options))
        except Exception as error:
            result["error"] = f"{type(error).__name__}: {error}"
            log.debug("accuracy check of partition %d failed: %s", index, error)
        results.append(result)
    return results


def _check_one(
    gm: torch.fx.GraphModule, names: set[str], values: dict[str, Any], options: Options
) -> dict[str, Any]:
    sub, input_names, output_names = partition_module(gm, names, values)
    actual = run_in_core(sub, [values[n] for n in input_names], options)
    worst: dict[str, Any] = {
        "max_rel_error": 0.0, "rtol": 0.0, "dtype": "", "worst_node": "", "exceeded": False,
    }  # fmt: skip
    for name, value in zip(output_names, actual, strict=True):
        expected = values[name]
        error, rtol = relative_error(value, expected)
        exceeded = error > rtol
        if (exceeded, error) > (worst["exceeded"], worst["max_rel_error"]) or not worst["dtype"]:
            worst = {"max_rel_error": error, "rtol": rtol, "dtype": str(expected.dtype),
                     "worst_node": name, "exceeded": exceeded}  # fmt: skip
    return worst


def warn_if_exceeded(graph: str, results: list[dict[str, Any]]) -> None:
    """Warns once per graph and partition whose error exceeds its tolerance."""
    for r in results:
        if r.get("exceeded"):
            warn_once(
                f"accuracy:{graph}:{r['partition']}",
                f"mybackend accuracy check: {graph} partition {r['partition']} differs from "
                f"eager: worst relative error {r['max_rel_error']:.3g} > tolerance "
                f"{r['rtol']:.3g} ({r['dtype']}) at node {r['worst_node']}; partition nodes: "
                f"{', '.join(r['nodes'])}",
            )
        elif r.get("error"):
            log.info("accuracy check: %s partition %d not checked: %s",
                     graph, r["partition"], r["error"])  # fmt: skip
