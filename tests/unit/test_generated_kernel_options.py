"""Options of the generated-kernel path, on CPU: where the kernel cache
lives on disk (option kernel_cache_dir, MYBACKEND_CACHE_DIR) and how small
a group may be (min_fused_nodes).

Graphs are traced with fake CUDA tensors and compiled with NVRTC, which
needs no GPU (as in tests/unit/test_fusion.py). The disk-cache tests run
each compile in a fresh interpreter with this process's sys.path, because
the kernel cache's memory half lives as long as the process: only a new
process shows what the disk holds.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend
from mybackend import _C, Options
from mybackend.lowering import lower
from tests.testing import run_in_fresh_python

pytestmark = pytest.mark.skipif(not _C.cuda_enabled(), reason="a build without CUDA has no NVRTC")

# Compiles one elementwise chain for fake CUDA tensors and prints the kernel
# cache's counters and the plan's kernels as JSON.
CHILD = """
import json, sys
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
import mybackend
from mybackend import Options, _C
from mybackend.lowering import lower

options = Options.from_user(None, {"generated_kernels": True, **json.loads(sys.argv[1])})
with FakeTensorMode(allow_non_fake_inputs=True):
    x = torch.empty(16, 8, device="cuda")
gm = make_fx(lambda x: torch.sigmoid(x * 5 - 2).exp(), tracing_mode="fake")(x)
lowered = lower(gm, [])
compiled = _C.compile(lowered.graph, options.core_options(), lowered.run_python_node)
kernels = [k for k in compiled.report()["kernels"] if k["kind"] == "pointwise"]
print(json.dumps({"stats": _C.kernel_cache_stats(), "compiled": [k["compiled"] for k in kernels],
                  "problems": [k["problem"] for k in kernels], "package": mybackend.__file__}))
"""


def _compile_in_new_process(
    tmp_path: Path, options: dict[str, Any], env: dict[str, str] | None = None
) -> dict[str, Any]:
    # Everything the default location could fall back to lies under tmp_path,
    # so a test can see whether anything was written anywhere.
    child_env = {k: v for k, v in os.environ.items() if k != "MYBACKEND_CACHE_DIR"}
    child_env.update(
        MYBACKEND_GENERATED_KERNELS="1",
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
    )
    child_env.update(env or {})
    code = CHILD.replace("sys.argv[1]", repr(json.dumps(options)))
    result = run_in_fresh_python(code, env=child_env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["package"] == mybackend.__file__, "the child imported another mybackend"
    assert out["compiled"] == [True], out["problems"]
    return out


def _entries(root: Path) -> list[Path]:
    return sorted((root / "kernels").glob("*.mbk")) if (root / "kernels").is_dir() else []


def _kernel_cache_files(folder: Path) -> list[Path]:
    """What our disk cache would have written under ``folder``: a ``mybackend``
    folder or a cache entry. Other caches under a GPU machine's $HOME (the
    CUDA driver's JIT cache, $HOME/.nv/ComputeCache, appeared there on the
    H100 machine) are not ours to police."""
    return sorted(p for p in folder.rglob("*") if p.name == "mybackend" or p.suffix == ".mbk")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_option_relocates_the_disk_cache_and_a_second_process_compiles_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "given" / "cache"
    env_dir = tmp_path / "from-env"  # set too: the option wins
    first = _compile_in_new_process(
        tmp_path, {"kernel_cache_dir": str(root)}, {"MYBACKEND_CACHE_DIR": str(env_dir)}
    )
    assert first["stats"]["compiles"] >= 1
    entries = _entries(root)
    assert entries, "no cache entry in the given folder"
    assert _mode(tmp_path / "given") == 0o700
    assert _mode(root) == 0o700 and _mode(root / "kernels") == 0o700
    assert all(_mode(e) == 0o600 for e in entries)
    assert not env_dir.exists()
    assert _kernel_cache_files(tmp_path / "xdg") == []
    assert _kernel_cache_files(tmp_path / "home") == []

    second = _compile_in_new_process(tmp_path, {"kernel_cache_dir": str(root)})
    assert second["stats"]["compiles"] == 0, second["stats"]
    assert second["stats"]["disk_hits"] == first["stats"]["compiles"]
    assert second["stats"]["disk_rejects"] == 0
    assert _entries(root) == entries


def test_environment_variable_relocates_the_disk_cache(tmp_path: Path) -> None:
    from_env = tmp_path / "from-env"
    _compile_in_new_process(tmp_path, {}, {"MYBACKEND_CACHE_DIR": str(from_env)})
    assert _entries(from_env)
    assert _kernel_cache_files(tmp_path / "xdg") == []


# The C++ test DirectoryResolutionOrder covers every spelling of "off".
@pytest.mark.parametrize(
    ("options", "env"),
    [
        ({"kernel_cache_dir": "off"}, {"MYBACKEND_CACHE_DIR": "{tmp}/env"}),
        ({}, {"MYBACKEND_CACHE_DIR": "0"}),
    ],
    ids=["option-off", "env-0"],
)
def test_disabled_disk_cache_writes_nothing(
    tmp_path: Path, options: dict[str, Any], env: dict[str, str]
) -> None:
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    out = _compile_in_new_process(tmp_path, options, env)
    assert out["stats"]["compiles"] >= 1  # a new process compiles: nothing to read back
    assert not (tmp_path / "env").exists()
    assert _kernel_cache_files(tmp_path) == [], "the disabled cache wrote files"


def test_kernel_cache_dir_reaches_the_core_as_a_location() -> None:
    assert Options().core_options()["kernel_cache_dir"] is None
    assert Options(kernel_cache_dir="off").core_options()["kernel_cache_dir"] == ""
    assert Options(kernel_cache_dir="").core_options()["kernel_cache_dir"] == ""
    relative = Options(kernel_cache_dir="rel/dir").core_options()["kernel_cache_dir"]
    assert relative == os.path.join(os.getcwd(), "rel", "dir")
    home = Options(kernel_cache_dir="~/k").core_options()["kernel_cache_dir"]
    assert home == os.path.join(os.path.expanduser("~"), "k")
    with pytest.raises(TypeError, match="kernel_cache_dir"):
        Options.from_user(None, {"kernel_cache_dir": 3})


# --- min_fused_nodes ------------------------------------------------------


def _pointwise_kernels(fn: Callable[..., Any], options: dict[str, Any]) -> list[dict[str, Any]]:
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, 8, device="cuda")
    lowered = lower(make_fx(fn, tracing_mode="fake")(x), [])
    core = Options.from_user(None, {"generated_kernels": True, **options}).core_options()
    compiled = _C.compile(lowered.graph, core, lowered.run_python_node)
    return [k for k in compiled.report()["kernels"] if k["kind"] == "pointwise"]


def test_min_fused_nodes_lets_a_lone_op_become_a_generated_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MYBACKEND_GENERATED_KERNELS", "1")
    assert _pointwise_kernels(torch.exp, {}) == []  # default 2: a lone op stays ATen
    kernels = _pointwise_kernels(torch.exp, {"min_fused_nodes": 1})
    assert len(kernels) == 1 and kernels[0]["compiled"], kernels
    chain = lambda x: (x * 2).exp()  # noqa: E731
    assert _pointwise_kernels(chain, {"min_fused_nodes": 3}) == []
    assert len(_pointwise_kernels(chain, {"min_fused_nodes": 2})) == 1
    with pytest.raises(TypeError, match="min_fused_nodes"):
        Options.from_user(None, {"min_fused_nodes": 0})
