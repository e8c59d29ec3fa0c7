"""The example notebook runs top to bottom on the CPU.

With nbclient (the ``test`` extra) it runs in a real Jupyter kernel; the
notebook's code cells also run as one script in a fresh interpreter, so the
example is checked even where Jupyter is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing import HANG_GUARD_S

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mybackend_tour.ipynb"


def _code_cells() -> list[str]:
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def test_notebook_has_no_stored_outputs() -> None:
    notebook = json.loads(NOTEBOOK.read_text())
    assert all(not c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code")


def test_notebook_code_runs_as_a_script(tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"
    script.write_text("\n\n".join(_code_cells()) + "\n")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=tmp_path,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "parameters match eager" in done.stdout and "inference matches eager" in done.stdout
    assert "aten::cumsum.default" in done.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("nbclient") is None or importlib.util.find_spec("ipykernel") is None,
    reason="needs nbclient and ipykernel (pip install -e .[test])",
)
def test_notebook_runs_in_a_jupyter_kernel(tmp_path: Path) -> None:
    import nbclient
    import nbformat

    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=HANG_GUARD_S,
        kernel_name="python3",
        resources={"metadata": {"path": tmp_path}},
    )
    client.execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any('class="mb-report"' in h for h in html)  # the report rendered as a table
    assert any("digraph" in h or "<svg" in h for h in html)  # the partition map
