"""Helpers shared by the test tiers."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import torch

import mybackend.aot
from mybackend.decompositions import decomposition_table
from mybackend.reports import GraphRecord, collecting

# Note [Tests assert behaviour, never time]
# Speed belongs to the benchmarks on the GPU machine. A test waits for a
# subprocess, a thread or a background compile only to catch a hang, and
# then as long as a busy 2-core CI machine may need (a quick CLI run took
# 68 s there while another build ran): one generous guard, used everywhere,
# so no test fails because the machine was slow. test_no_wall_clock.py
# keeps clocks out of tests/ otherwise.
HANG_GUARD_S = 1800.0


def wait_until(condition: Callable[[], bool], what: str, poll_s: float = 0.01) -> None:
    """Polls ``condition`` until it holds; fails only if it never does within
    the hang guard (Note [Tests assert behaviour, never time])."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen (hang guard {HANG_GUARD_S:.0f} s)")
        time.sleep(poll_s)


def use_cuda_decompositions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces CPU graphs with the table CUDA graphs get: CPU graphs keep
    ATen's ops whole (Note [Eager's kernels on the CPU]), and tests of
    rewrites meant for CUDA graphs need the decomposed ops there too."""
    monkeypatch.setattr(
        mybackend.aot, "decomposition_table", lambda *args, **kwargs: decomposition_table()
    )


def error_ratio_check(
    actual: torch.Tensor,
    expected_fn: Callable[[], torch.Tensor],
    eager: torch.Tensor,
    k: float = 3.0,
) -> None:
    """Asserts the compiled result is no worse than k x eager's own error
    against a float64 reference (plus a floor for exact-ish results)."""
    reference = expected_fn().double()
    scale = reference.abs().max().item() + 1e-12
    err_compiled = (actual.double() - reference).abs().max().item() / scale
    err_eager = (eager.double() - reference).abs().max().item() / scale
    floor = 1e-6 if actual.dtype in (torch.float32, torch.float64) else 1e-2
    assert err_compiled <= k * err_eager + floor, (err_compiled, err_eager)


def assert_same(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compares nested outputs (tensors, tuples, lists, dicts, scalars)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), type(actual)
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e, rtol, atol)
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for key in expected:
            assert_same(actual[key], expected[key], rtol, atol)
    else:
        assert actual == expected


def compiled_records(fn: Callable[[], Any]) -> tuple[Any, list[GraphRecord]]:
    """Runs fn and returns its result and the records of graphs it compiled."""
    with collecting() as records:
        result = fn()
    return result, list(records)


def nodes_run_in_partitions(records: Sequence[GraphRecord]) -> int:
    """How many node executions the core ran inside its partitions."""
    return sum(r.compiled.stats()["nodes_run_in_partitions"] for r in records if r.compiled)


def run_in_fresh_python(
    code: str, env: Mapping[str, str] | None = None, timeout: float = HANG_GUARD_S
) -> subprocess.CompletedProcess[str]:
    """Runs code in a new interpreter (no state shared with the test process)
    that imports the same mybackend as this one.

    With site (the normal case, an editable install's finder included) the
    child gets the same site setup; when this process itself skipped site
    (-S, e.g. a worktree run beside an editable install of another checkout),
    the child skips it too and gets this process's sys.path, the folder of the
    mybackend imported here first. `env` replaces the environment (default:
    this process's).
    """
    import mybackend

    child_env = dict(os.environ if env is None else env)
    flags = []
    if sys.flags.no_site:
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(mybackend.__file__)))
        paths = [package_root] + [p for p in sys.path if p and p != package_root]
        child_env["PYTHONPATH"] = os.pathsep.join(paths)
        flags = ["-S"]
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env,
        check=False,
    )


def run_generated_norm(fn: Callable[..., Any], *inputs: torch.Tensor) -> list[torch.Tensor]:
    """Traces fn (one norm op) on `inputs`, compiles it with generated
    kernels, runs it once and checks that the generated norm kernel ran
    (not the op's ATen implementation); returns the outputs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from mybackend import _C
    from mybackend.lowering import lower

    lowered = lower(make_fx(fn, tracing_mode="fake")(*inputs), [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    out = compiled.run(list(inputs))
    torch.cuda.synchronize()
    stats = compiled.stats()
    assert stats["generated_norms_run"] == 1, (stats, compiled.report()["kernels"])
    assert stats["generated_kernel_fallbacks"] == 0, compiled.report()["kernels"]
    return list(out)


def call_targets(gm: torch.fx.GraphModule) -> list[Any]:
    """The targets of gm's call_function nodes, in graph order."""
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def compiled_through_rewrite(
    rewrite: Callable[[torch.fx.GraphModule], int], fn: Callable[..., Any]
) -> tuple[Callable[..., Any], list[tuple[int, torch.fx.GraphModule]]]:
    """``fn`` compiled (fullgraph) by a backend that runs only the dynamo-graph
    rewrite ``rewrite`` and then the graph as it is; the list gets (the
    rewrite's count, the rewritten graph) for each graph compiled."""
    seen: list[tuple[int, torch.fx.GraphModule]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append((rewrite(gm), gm))
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True), seen


def traced_and_rewritten(
    rewrite: Callable[[torch.fx.GraphModule], int],
    fn: Callable[..., torch.Tensor],
    *inputs: torch.Tensor,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, int]:
    """``fn`` traced with FakeTensor values twice: as traced, and after the
    graph pass ``rewrite`` (whose count comes third); the rewritten graph
    must lint."""
    from torch.fx.experimental.proxy_tensor import make_fx

    before = make_fx(fn, tracing_mode="fake")(*inputs)
    after = make_fx(fn, tracing_mode="fake")(*inputs)
    count = rewrite(after)
    after.graph.lint()
    return before, after, count


def assert_same_result(before: Any, after: Any, inputs: Sequence[torch.Tensor]) -> None:
    """Two graphs of one function give equal values with equal strides."""
    want, got = before(*inputs), after(*inputs)
    assert torch.equal(got, want)
    assert got.stride() == want.stride()


def fake_graph(
    fn: Callable[..., object], *shapes: tuple[int, ...], device: str = "cuda"
) -> torch.fx.GraphModule:
    """``fn`` traced to ATen on fake fp32 tensors of ``shapes`` (fake CUDA
    ones need no GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(s, device=device) for s in shapes]
        return make_fx(fn, tracing_mode="fake")(*inputs)


def training_steps_match_eager(
    eager: torch.nn.Module,
    shape: Sequence[int],
    steps: int = 2,
    memory_format: torch.memory_format | None = None,
) -> torch.nn.Module:
    """Trains a compiled copy of `eager` (strict) beside it for `steps` calls
    on new inputs of `shape`: outputs and input gradients match at every
    step, parameter gradients at the end. Returns the compiled copy."""
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, backend="mybackend", options={"strict": True})
    for step in range(steps):
        x = torch.randn(tuple(shape)) * 3 + step
        if memory_format is not None:
            x = x.to(memory_format=memory_format)
        x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
        grad = torch.randn(tuple(shape))
        y_eager, y_compiled = eager(x_eager), compiled(x_compiled)
        y_eager.backward(grad)
        y_compiled.backward(grad)
        torch.testing.assert_close(y_compiled, y_eager)
        torch.testing.assert_close(x_compiled.grad, x_eager.grad)
    for (name, p_eager), p_compiled in zip(
        eager.named_parameters(), compiled_module.parameters(), strict=True
    ):
        torch.testing.assert_close(p_compiled.grad, p_eager.grad, msg=name)
    return compiled_module
