"""Stage 9: input ownership and the memory plan on CPU.

Note [Input ownership] (src_cpp/runtime/recovery_window.h) and Note [Memory
plan] (src_cpp/runtime/memory_plan.h): a boxed call hands its inputs to the
executor, which drops each right after the ATen call that reads it last, so
a backward graph frees saved activations as it goes; the first call of an
input signature keeps them for recovery.

Inputs are watched through StorageWeakRef (a C++ weak reference to the
storage, blind to Python wrappers), from a TorchDispatchMode that sees every
ATen call the executor makes, so a release inside a multi-node ATen sequence
is observed where it happens.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from mybackend import _C
from mybackend.compiled import CompiledGraphFunction
from mybackend.lowering import lower
from mybackend.options import Options

_fail_next = {"count": 0}


@torch.library.custom_op("mb_memtest::flaky", mutates_args=())
def flaky(x: torch.Tensor) -> torch.Tensor:
    """Fails the next `count` calls: a stand-in for a backend-only failure."""
    if _fail_next["count"] > 0:
        _fail_next["count"] -= 1
        raise RuntimeError("injected failure inside the compiled graph")
    return x + 1


@flaky.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _WatchInput(TorchDispatchMode):
    """Records, at each call of `op`, whether the watched storage is gone."""

    def __init__(self, storage: StorageWeakRef, op: Any) -> None:
        super().__init__()
        self.storage, self.op, self.expired_at_op = storage, op, []  # type: ignore[var-annotated]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is self.op:
            self.expired_at_op.append(self.storage.expired())
        return func(*args, **(kwargs or {}))


def _backward_like(saved: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    # `saved` is read by the first node only; the rest of the ATen sequence
    # runs after its last use.
    a = saved * grad
    b = torch.exp(a)
    c = b + 1
    return torch.tanh(c)


def _compiled(fn: Callable[..., Any], *examples: torch.Tensor) -> tuple[Any, Any, Any]:
    gm = make_fx(fn, tracing_mode="fake")(*examples)
    lowered = lower(gm, [])
    core = _C.compile(lowered.graph, {}, lowered.run_python_node)
    return gm, lowered, core


def _watched_call(call: Callable[[list[Any]], Any], op: Any) -> tuple[list[bool], list[Any], Any]:
    """Runs `call` on a fresh boxed [saved, grad] list that nobody else holds."""
    args = [torch.randn(64, 64), torch.randn(64, 64)]
    watch = _WatchInput(StorageWeakRef(args[0].untyped_storage()), op)
    with watch:
        out = call(args)
    return watch.expired_at_op, args, out


def test_the_core_releases_an_input_after_its_last_use_inside_an_aten_sequence() -> None:
    _, _, core = _compiled(_backward_like, torch.randn(64, 64), torch.randn(64, 64))
    report = core.report()
    assert len(report["kernels"]) == 1 and report["kernels"][0]["kind"] == "aten_sequence"
    assert report["memory_plan"]["points"] == 4  # one point per ATen call of the sequence
    # First call of this input signature: a trial, the inputs are kept for recovery.
    expired, args, _ = _watched_call(core.run_boxed, torch.ops.aten.exp.default)
    assert expired == [False] and args == []
    # Proven signature: `saved` is gone before exp runs, the list is empty.
    expired, args, out = _watched_call(core.run_boxed, torch.ops.aten.exp.default)
    assert expired == [True] and args == []
    assert out[0].shape == (64, 64)


def test_the_boxed_callable_holds_no_input_while_the_graph_runs() -> None:
    gm, lowered, core = _compiled(_backward_like, torch.randn(64, 64), torch.randn(64, 64))
    f = CompiledGraphFunction("g", lowered, core, gm, Options.from_user())
    _watched_call(f, torch.ops.aten.exp.default)
    expired, args, _ = _watched_call(f, torch.ops.aten.exp.default)
    assert expired == [True] and args == []
    x, g = torch.randn(64, 64), torch.randn(64, 64)
    torch.testing.assert_close(f([x.clone(), g.clone()])[0], _backward_like(x, g))


def _flaky_graph(saved: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    a = saved * grad
    return torch.ops.mb_memtest.flaky(a) * 2  # runs after `saved` was released


def test_a_failing_first_call_recovers_eagerly_with_the_inputs_given_back() -> None:
    gm, lowered, core = _compiled(_flaky_graph, torch.randn(8), torch.randn(8))
    f = CompiledGraphFunction("flaky", lowered, core, gm, Options.from_user())
    saved, grad = torch.randn(8), torch.randn(8)
    expected = (saved * grad + 1) * 2
    _fail_next["count"] = 1  # the compiled run fails; eager's rerun succeeds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = [saved, grad]
        out = f(args)
    assert args == []
    torch.testing.assert_close(out[0], expected)
    assert any("injected failure" in str(w.message) for w in caught)
    torch.testing.assert_close(f([saved, grad])[0], expected)  # eagerly from now on


def test_the_core_gives_the_inputs_back_only_on_a_trial_call() -> None:
    _, _, core = _compiled(_flaky_graph, torch.randn(8), torch.randn(8))
    saved, grad = torch.randn(8), torch.randn(8)
    _fail_next["count"] = 1
    args = [saved, grad]
    with pytest.raises(RuntimeError, match="injected failure"):
        core.run_boxed(args)
    assert len(args) == 2 and args[0] is saved and args[1] is grad
    core.run_boxed([saved, grad])  # the signature runs to the end: proven
    _fail_next["count"] = 1
    args = [saved, grad]
    with pytest.raises(RuntimeError, match="injected failure"):
        core.run_boxed(args)
    assert args == []  # a proven signature keeps nothing: the error is raised as it is
    other = [torch.randn(2, 4), torch.randn(2, 4)]  # a new signature is a trial again
    _fail_next["count"] = 1
    with pytest.raises(Exception):  # noqa: B017 - the binder or the op, either gives back
        core.run_boxed(other)
    assert len(other) == 2


def test_strict_mode_raises_instead_of_recovering() -> None:
    gm, lowered, core = _compiled(_flaky_graph, torch.randn(8), torch.randn(8))
    f = CompiledGraphFunction("flaky", lowered, core, gm, Options.from_user(None, {"strict": True}))
    _fail_next["count"] = 1
    with pytest.raises(RuntimeError, match="injected failure"):
        f([torch.randn(8), torch.randn(8)])
    _fail_next["count"] = 0


def test_cpu_graphs_plan_no_buffers_and_explain_says_so() -> None:
    from mybackend.reports import memory_plan_line

    _, _, core = _compiled(_backward_like, torch.randn(4, 4), torch.randn(4, 4))
    plan = core.report()["memory_plan"]
    assert plan["planned_values"] == 0 and plan["buffers"] == 0 and plan["peak_bytes"] == 0
    assert "no engine output" in memory_plan_line(plan)
    stats = core.stats()
    assert stats["planned_outputs_taken"] == 0 and stats["planned_outputs_missed"] == 0


def _chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a = torch.sin(x) * 2  # pointwise group
    b = a @ w  # matmul group; a dies here
    c = torch.cos(b) + 1  # pointwise group: takes a's buffer
    d = c @ w  # matmul group: takes b's buffer
    return torch.sin(d) * 3  # a graph output: never planned


def test_a_cuda_graph_compiled_on_cpu_plans_its_engine_outputs() -> None:
    # Fake CUDA tensors: planning and NVRTC need no GPU (Note [Compile now, load later]).
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mybackend.reports import memory_plan_line

    with FakeTensorMode():
        x, w = torch.empty(256, 256, device="cuda"), torch.empty(256, 256, device="cuda")
        gm = make_fx(_chain, tracing_mode="fake")(x, w)
    lowered = lower(gm, [])
    options = {"generated_kernels": True, "kernel_cache_dir": ""}
    core = _C.compile(lowered.graph, options, lowered.run_python_node)
    report = core.report()
    if not all(k.get("compiled") for k in report["kernels"]):
        pytest.skip("this build runs no engine group (no CUDA support, or NVRTC failed)")
    assert [k["kind"] for k in report["kernels"]] == [
        "pointwise", "matmul", "pointwise", "matmul", "pointwise",
    ]  # fmt: skip
    bytes_each = 256 * 256 * 4
    assert report["memory_plan"] == {
        "points": 5,
        "planned_values": 4,
        "buffers": 2,
        "reuses": 2,
        "bytes_without_reuse": 4 * bytes_each,
        "bytes_with_reuse": 2 * bytes_each,
        "peak_bytes": 2 * bytes_each,
    }
    line = memory_plan_line(report["memory_plan"])
    assert "4 engine outputs in 2 buffers (2 reuses)" in line and "1.00 MiB without" in line
