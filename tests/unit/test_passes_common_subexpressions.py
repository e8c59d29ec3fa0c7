"""Stage 2: our common-subexpression pass before the min-cut partitioner
(Note [Our own common-subexpression pass] in mybackend/passes/common_subexpressions.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._functorch.config as functorch_config
from torch import nn
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.aot import min_cut_partition
from mybackend.decompositions import decomposition_table
from mybackend.passes.common_subexpressions import eliminate_common_subexpressions
from tests.testing import HANG_GUARD_S

aten = torch.ops.aten


def _graph(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _count(gm: torch.fx.GraphModule, target: Any) -> int:
    return len(gm.graph.find_nodes(op="call_function", target=target))


def test_the_same_computation_is_kept_once() -> None:
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2 + x.sin() * 2

    gm = _graph(twice, torch.randn(4))
    assert _count(gm, aten.sin.default) == 2

    assert eliminate_common_subexpressions(gm.graph) == 2  # the second sin, then its mul

    assert _count(gm, aten.sin.default) == 1
    assert _count(gm, aten.mul.Tensor) == 1
    gm.recompile()
    x = torch.randn(4)
    torch.testing.assert_close(gm(x), twice(x))


def test_a_mutation_between_two_reads_keeps_both() -> None:
    def read_mutate_read(x: torch.Tensor) -> torch.Tensor:
        before = x.cos()
        x.add_(1)
        return before + x.cos()

    gm = _graph(read_mutate_read, torch.randn(4))
    assert eliminate_common_subexpressions(gm.graph) == 0
    assert _count(gm, aten.cos.default) == 2


def test_random_ops_and_different_number_types_are_not_merged() -> None:
    def noise(x: torch.Tensor) -> torch.Tensor:
        return torch.rand_like(x) + torch.rand_like(x) + x.add(1) + x.add(1.0)

    gm = _graph(noise, torch.randn(4))
    assert eliminate_common_subexpressions(gm.graph) == 0
    assert _count(gm, aten.rand_like.default) == 2


def test_values_returned_separately_stay_separate() -> None:
    def two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.exp(), x.exp()

    gm = _graph(two_outputs, torch.randn(4))
    assert eliminate_common_subexpressions(gm.graph) == 0
    gm.recompile()
    a, b = gm(torch.randn(4))
    assert a.data_ptr() != b.data_ptr()


class _Block(nn.Module):
    """Convolution, batch norm and ReLU, then a GELU MLP reading the same
    activation twice: recomputable ops and duplicates for the partitioner."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        h = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return (torch.nn.functional.gelu(self.fc(h)) * torch.nn.functional.gelu(self.fc(h)),)


def test_the_partitioner_makes_the_same_graphs_as_with_torchs_pass() -> None:
    codes: dict[str, tuple[str, str]] = {}

    def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        for name in ("torch", "ours"):
            graph = torch.fx.Graph()
            graph.output(graph.graph_copy(joint.graph, {}))  # values shared, as in the joint
            copy = torch.fx.GraphModule(joint, graph)
            if name == "torch":
                with functorch_config.patch(cse=True):
                    forward, backward = min_cut_rematerialization_partition(
                        copy, joint_inputs, **kwargs
                    )
            else:
                forward, backward = min_cut_partition(copy, joint_inputs, **kwargs)
            codes[name] = (forward.code, backward.code)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def keep(gm: torch.fx.GraphModule, _: Any) -> Any:
        return gm

    torch.manual_seed(0)
    compiled = aot_module_simplified(
        _Block(),
        [torch.randn(2, 3, 6, 6, requires_grad=True)],
        fw_compiler=keep,
        bw_compiler=keep,
        decompositions=decomposition_table(),
        partition_fn=partition,
        keep_inference_input_mutations=True,
    )
    compiled(torch.randn(2, 3, 6, 6, requires_grad=True))
    assert codes["ours"] == codes["torch"]
    forward = codes["ours"][0]
    assert forward.count("aten.addmm") == 1, forward  # the duplicate product merged


def test_a_training_compile_does_not_load_inductor() -> None:
    """The reason for the pass: a process that compiles training graphs with
    mybackend never imports Inductor's pattern matcher (and its lowering)."""
    script = textwrap.dedent(
        """
        import sys, torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        compiled = torch.compile(model, backend="mybackend", options={"strict": True})
        compiled(torch.randn(4, 8)).sum().backward()
        print("torch._inductor.pattern_matcher" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout + result.stderr


def test_a_failing_pass_leaves_the_partition_to_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a compile failure: the partitioner runs with torch's own pass."""
    import mybackend.aot as aot

    def broken(graph: torch.fx.Graph) -> int:
        raise RuntimeError("broken pass")

    seen: list[bool] = []

    def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        seen.append(functorch_config.cse)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    monkeypatch.setattr(aot, "eliminate_common_subexpressions", broken)
    monkeypatch.setattr(aot, "min_cut_rematerialization_partition", partition)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(2, 4)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    compiled(x).sum().backward()
    assert seen == [True]
    torch.testing.assert_close(compiled(x), model(x))
