"""Reproducers: written on a compile failure, and they reproduce it when run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mybackend
import mybackend.aot
from tests.testing import HANG_GUARD_S

# Breaks lowering of any graph with a cumsum; imported by the test process and,
# through FAULT, by the subprocess that runs the reproducer.
FAULT = """
import mybackend.aot as _aot
_real_lower = _aot.lower
def _broken_lower(gm, inputs):
    if any("cumsum" in str(n.target) for n in gm.graph.nodes):
        raise RuntimeError("injected failure: cannot lower cumsum")
    return _real_lower(gm, inputs)
_aot.lower = _broken_lower
"""


def _model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x) @ w
    return torch.cumsum(y, 0).view(-1) + torch.tensor(1.0)


def _inject(monkeypatch: pytest.MonkeyPatch) -> None:
    namespace: dict[str, object] = {}
    real = mybackend.aot.lower
    exec(FAULT.replace("_aot.lower = _broken_lower", ""), namespace)
    namespace["_real_lower"] = real
    monkeypatch.setattr(mybackend.aot, "lower", namespace["_broken_lower"])


def _run_script(path: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = prelude + f"\nimport runpy\nrunpy.run_path({str(path)!r}, run_name='__main__')\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=dict(os.environ), check=False)  # fmt: skip


def test_compile_failure_writes_reproducer_named_in_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _inject(monkeypatch)
    f = torch.compile(_model, backend="mybackend", options={"dump_dir": str(tmp_path)})
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with pytest.warns(UserWarning, match=r"Reproducer: .*\.repro\.py") as caught:
        out = f(x, w)
    torch.testing.assert_close(out, _model(x, w))
    path = Path(str(caught[0].message).split("Reproducer: ")[1].strip())
    text = path.read_text()
    assert path.parent == tmp_path and "injected failure: cannot lower cumsum" in text
    assert "torch.ops.aten.cumsum.default" in text
    assert "('tensor', (3, 4), (4, 1), 'float32', 'cpu', False)" in text

    reproduced = _run_script(path, FAULT)
    assert reproduced.returncode != 0
    assert "RuntimeError: injected failure: cannot lower cumsum" in reproduced.stderr
    # Without the fault the same script compiles and runs, and says so.
    healthy = _run_script(path)
    assert healthy.returncode == 0, healthy.stderr[-3000:]
    assert "the failure did not reproduce" in healthy.stdout


def test_strict_failure_names_reproducer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _inject(monkeypatch)
    f = torch.compile(_model, backend="mybackend",
                      options={"dump_dir": str(tmp_path), "strict": True})  # fmt: skip
    with pytest.raises(Exception, match="injected failure") as raised:
        f(torch.randn(3, 4), torch.randn(4, 4))
    notes, error = "", raised.value  # dynamo wraps ours: walk the chain
    while error is not None:
        notes += "\n".join(getattr(error, "__notes__", []))
        error = error.__cause__ or error.__context__
    if sys.version_info >= (3, 11):
        assert "mybackend reproducer:" in notes
    assert list(tmp_path.glob("*.repro.py"))


def test_without_dump_dir_the_warning_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _inject(monkeypatch)
    monkeypatch.delenv("MYBACKEND_DUMP_DIR", raising=False)
    f = torch.compile(_model, backend="mybackend")
    with pytest.warns(UserWarning, match="Set MYBACKEND_DUMP_DIR to write a reproducer"):
        f(torch.randn(3, 4), torch.randn(4, 4))


def test_input_specs_cover_strides_dtypes_and_ints() -> None:
    from mybackend.debug.repro import make_input
    from mybackend.hooks.reproducer import input_spec

    t = torch.randn(4, 6).t()
    spec = input_spec(t)
    assert spec == ("tensor", (6, 4), (1, 6), "float32", "cpu", False)
    rebuilt = make_input(spec)
    assert rebuilt.shape == t.shape and rebuilt.stride() == t.stride()
    assert input_spec(3) == ("int", 3) and make_input(("int", 3)) == 3
    assert make_input(input_spec(torch.zeros(2, dtype=torch.int64))).dtype == torch.int64
    with pytest.raises(ValueError, match="cannot describe a graph input of type str"):
        input_spec("x")


def test_failed_graph_still_dumps_its_aten_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _inject(monkeypatch)
    f = torch.compile(_model, backend="mybackend", options={"dump_dir": str(tmp_path)})
    with pytest.warns(UserWarning, match="injected failure"):
        f(torch.randn(3, 4), torch.randn(4, 4))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".aten.py") for n in names)
    report = next(p for p in tmp_path.iterdir() if p.name.endswith(".report.txt")).read_text()
    assert "runs eagerly: RuntimeError: injected failure" in report and "reproducer:" in report
