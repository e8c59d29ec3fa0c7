"""Registration, the fallback policy and strict mode."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest
import torch

import mybackend
import mybackend.aot
from tests.testing import compiled_records, run_in_fresh_python


def test_registered_by_name_in_a_fresh_interpreter_without_import() -> None:
    result = run_in_fresh_python(
        """
        import sys, torch
        f = torch.compile(lambda x: torch.relu(x) * 2, backend="mybackend")
        out = f(torch.tensor([-1.0, 2.0]))
        assert out.tolist() == [0.0, 4.0], out
        assert "mybackend" in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_registration_is_idempotent() -> None:
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    lookup_backend("mybackend")  # dynamo loads it (entry point or earlier import)
    importlib.reload(mybackend)  # a re-run notebook cell
    mybackend.backend.register()
    mybackend.backend.register()
    assert "mybackend" in list_backends()
    assert callable(lookup_backend("mybackend"))


def test_import_after_dynamo_loaded_entry_point_in_fresh_interpreter() -> None:
    result = run_in_fresh_python(
        """
        import torch
        from torch._dynamo.backends.registry import lookup_backend
        lookup_backend("mybackend")
        import mybackend, importlib
        importlib.reload(mybackend)
        f = torch.compile(lambda x: x + 1, backend="mybackend")
        assert f(torch.zeros(1)).item() == 1.0
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _broken_lower(*args: object, **kwargs: object) -> None:
    raise RuntimeError("injected lowering failure at aten::mul.Tensor")


def test_compile_failure_warns_once_and_runs_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mybackend.aot, "lower", _broken_lower)
    f = torch.compile(lambda x: x * 3 + 1, backend="mybackend")
    with pytest.warns(UserWarning, match="injected lowering failure at aten::mul.Tensor"):
        out, records = compiled_records(lambda: f(torch.ones(3)))
    assert out.tolist() == [4.0, 4.0, 4.0]
    assert records[0].fallback_reason and "injected" in records[0].fallback_reason


def test_strict_mode_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mybackend.aot, "lower", _broken_lower)
    f = torch.compile(lambda x: x * 3, backend="mybackend", options={"strict": True})
    with pytest.raises(Exception, match="injected lowering failure"):
        f(torch.ones(3))


class _FailingCore:
    """Fails as the core does on a trial call: the boxed list is emptied, then
    given its inputs back before the error (Note [Input ownership])."""

    def run_boxed(self, args: list[object]) -> list[object]:
        taken = list(args)
        args.clear()
        args.extend(taken)
        raise RuntimeError("injected runtime failure")

    def stats(self) -> dict[str, int]:
        return {}


def test_runtime_failure_falls_back_when_eager_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    original = mybackend.compiled.CompiledGraphFunction.__init__

    def init(self: object, name: str, lowered: object, compiled: object, *rest: object) -> None:
        original(self, name, lowered, _FailingCore(), *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(mybackend.compiled.CompiledGraphFunction, "__init__", init)
    f = torch.compile(lambda x: x - 1, backend="mybackend")
    with pytest.warns(UserWarning, match="injected runtime failure"):
        assert f(torch.ones(2)).tolist() == [0.0, 0.0]
    assert f(torch.ones(2)).tolist() == [0.0, 0.0]  # eagerly from now on, no second warning


def test_user_errors_surface_as_in_eager() -> None:
    f = torch.compile(lambda a, b: a @ b, backend="mybackend")
    with pytest.raises(Exception, match=r"(?i)shape|size|mat1"):
        f(torch.ones(2, 3), torch.ones(2, 3))


@pytest.mark.parametrize("strict", [True, False])
def test_aten_errors_inside_the_runtime_reach_python(strict: bool) -> None:
    # index_select fails only at run time, so torch throws its C++ exception
    # inside the runtime and it unwinds through _C's frames; it must arrive as
    # the Python error eager raises, never abort the process (a private
    # libgcc unwinder did: Note [Private libstdc++]). The first call runs under
    # aot_autograd's custom-op checking mode, later ones reach ATen directly.
    f = torch.compile(
        lambda x, i: torch.index_select(x, 0, i).sin(),
        backend="mybackend",
        options={"strict": strict},
    )
    for _ in range(2):
        with pytest.raises(IndexError, match="index out of range"):
            f(torch.ones(3), torch.tensor([5]))


@pytest.mark.parametrize("case", ["full_with_float", "dropout_p"])
def test_dynamo_restart_signals_pass_through(case: str) -> None:
    # Note [Dynamo's control-flow exceptions]: a Python float that changes
    # between calls makes aot_autograd's tensorify pass ask dynamo to
    # re-trace; caught as a failure, the graph would run eagerly for good.
    def full_with_float(x: torch.Tensor, s: float) -> torch.Tensor:
        return x + torch.full((3,), s)

    def dropout_p(x: torch.Tensor, p: float) -> torch.Tensor:
        return torch.nn.functional.dropout(x, p) * 0 + x * p

    fn = full_with_float if case == "full_with_float" else dropout_p
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="mybackend")
    x = torch.randn(3)
    records: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not trace ... runs eagerly"
        for s in (0.25, 0.5, 0.75):
            out, new_records = compiled_records(lambda s=s: compiled(x, s))
            records += new_records
            torch.testing.assert_close(out, fn(x, s))
    assert records and all(r.fallback_reason is None for r in records), records
    assert sum(r.compiled.stats()["nodes_run_in_partitions"] for r in records if r.compiled) > 0
