"""Build and packaging settings (issue 35, item 3), read without building.

The wheel: platform-specific, its Requires-Dist pinning the torch minor
version it is built against (tools/build_meta/torch_pin.py), built without
isolation so no second torch is pulled in. The C++ unit tests: configured by
every build, built only by tools/run_tests.sh in the same build tree.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.testing import HANG_GUARD_S

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _torch_pin_module() -> ModuleType:
    entry = PYPROJECT["tool"]["dynamic-metadata"][0]
    path = ROOT / entry["provider"]["path"] / (entry["provider"]["module"] + ".py")
    spec = importlib.util.spec_from_file_location("torch_pin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_requires_no_torch() -> None:
    requires = PYPROJECT["build-system"]["requires"]
    assert not [r for r in requires if r.startswith("torch")]
    assert "scikit-build-core>=1.0" in requires  # [[tool.dynamic-metadata]]


def test_dependencies_come_from_the_torch_pin() -> None:
    project = PYPROJECT["project"]
    assert project["dynamic"] == ["dependencies"]
    assert "dependencies" not in project
    (entry,) = PYPROJECT["tool"]["dynamic-metadata"]
    assert entry["provider"] == {"path": "tools/build_meta", "module": "torch_pin"}


def test_torch_pin_names_the_installed_minor_version() -> None:
    module = _torch_pin_module()
    major, minor = torch.__version__.split(".")[:2]
    (entry,) = PYPROJECT["tool"]["dynamic-metadata"]
    deps = module.dynamic_metadata(entry, {})["dependencies"]
    assert deps[0] == f"torch=={major}.{minor}.*"
    assert deps[1:] == ["numpy", "networkx", "sympy"]
    assert module.dynamic_wheel(entry) == {"dependencies": True}


@pytest.mark.parametrize(
    ("version", "pin"),
    [
        ("2.11.0", "torch==2.11.*"),
        ("2.11.0+cu130", "torch==2.11.*"),
        ("2.12.0.dev20260101+cpu", "torch==2.12.*"),
        ("2.13.0a0+git1234abc", "torch==2.13.*"),
    ],
)
def test_torch_requirement(version: str, pin: str) -> None:
    assert _torch_pin_module().torch_requirement(version) == pin


def test_wheel_metadata_pins_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # scikit-build-core's own metadata hook, the one `python -m build --wheel`
    # calls first: no CMake run, no compile.
    backend = pytest.importorskip("scikit_build_core.build")
    monkeypatch.chdir(ROOT)
    name = backend.prepare_metadata_for_build_wheel(str(tmp_path))
    metadata = (tmp_path / name / "METADATA").read_text()
    major, minor = torch.__version__.split(".")[:2]
    requires = [ln for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]
    assert f"Requires-Dist: torch=={major}.{minor}.*" in requires
    assert "Requires-Dist: numpy" in requires


def test_wheel_is_platform_specific() -> None:
    # A py3-none-any tag would come from wheel.py-api = "py3" or a build with
    # no compiled module; _C is installed into the wheel's platlib.
    assert PYPROJECT["tool"]["scikit-build"]["wheel"].get("py-api", "") == ""
    cmake = (ROOT / "src_cpp" / "CMakeLists.txt").read_text()
    assert "install(TARGETS _C LIBRARY DESTINATION mybackend)" in cmake


def test_cpp_tests_are_built_by_the_test_command_only() -> None:
    assert "add_subdirectory(tests/cpp EXCLUDE_FROM_ALL)" in (ROOT / "CMakeLists.txt").read_text()
    setup = (ROOT / "tools" / "setup.sh").read_text()
    run_tests = (ROOT / "tools" / "run_tests.sh").read_text()
    assert "mybackend_cpp_tests" not in setup and "ctest" not in setup
    assert "--target mybackend_cpp_tests" in run_tests


def test_setup_reports_each_step_s_seconds_without_pip_s_root_warning() -> None:
    """Issue 35: a person can follow the set-up, and a slow one says where
    its time went (each step ends with "done in N s"); pip's warning about
    running as root, which containers and CI always print, is silenced."""
    setup = (ROOT / "tools" / "setup.sh").read_text()
    steps = [line for line in setup.splitlines() if line.lstrip().startswith('echo "setup: ')]
    assert setup.count("step_done\n") >= 3, setup  # torch, the packages, the build
    assert len(steps) >= 4 and 'echo "setup: finished in $SECONDS s"' in setup, steps
    assert "export PIP_ROOT_USER_ACTION=ignore" in setup


def test_the_wheel_script_makes_a_manylinux_wheel_without_torch_inside(tmp_path: Path) -> None:
    """tools/build_wheel.sh (README, "Building a wheel"): a manylinux tag,
    no library grafted in (torch's, CUDA's and cuDNN's stay with torch),
    _C's RUNPATH pointing at the installed torch, torch's minor pinned."""
    subprocess.run(
        ["bash", str(ROOT / "tools" / "build_wheel.sh"), str(tmp_path)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=HANG_GUARD_S,
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert re.search(r"-manylinux_\d+_\d+_x86_64\.whl$", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert not [n for n in names if ".libs/" in n], names  # nothing grafted
        (extension,) = [n for n in names if re.fullmatch(r"mybackend/_C\..*\.so", n)]
        metadata = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
        (tmp_path / "_C.so").write_bytes(archive.read(extension))
    minor = ".".join(torch.__version__.split(".")[:2])
    assert f"Requires-Dist: torch=={minor}.*" in metadata
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / "_C.so")], check=True, capture_output=True, text=True
    ).stdout
    assert "$ORIGIN/../torch/lib" in dynamic


def test_cudnn_frontend_units_compile_without_its_json_library() -> None:
    """The frontend's JSON support is unused, and its header library is most
    of what the two frontend units compile (README, "Build time")."""
    commands = sorted(ROOT.glob("build/*/compile_commands.json"))
    if not commands:
        pytest.skip("no configured build tree")
    entries = [
        e
        for e in json.loads(commands[-1].read_text())
        if e["file"].endswith(("libs/cudnn_conv.cpp", "libs/cudnn_sdpa.cpp"))
    ]
    if not entries:
        pytest.skip("this build has no cuDNN frontend")
    for entry in entries:
        assert "-DCUDNN_FRONTEND_SKIP_JSON_LIB" in entry["command"], entry["file"]


def test_a_carried_device_build_is_keyed_by_the_inputs_of_the_cpp_build(tmp_path: Path) -> None:
    # Note [Builds carried between device calls]: a change to the C++ build's
    # inputs, or a Python module added (the editable hook lists them by name),
    # builds again; a Python module's contents do not.
    tree = tmp_path / "tree"
    for name in ("src_cpp/a.cpp", "cmake/x.cmake", "tools/build_meta/pin.py", "mybackend/m.py"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("one\n")
    (tree / "CMakeLists.txt").write_text("project(x)\n")
    (tree / "pyproject.toml").write_text("[project]\n")
    (tree / "tools" / "device_build.sh").write_bytes(
        (ROOT / "tools" / "device_build.sh").read_bytes()
    )

    def build_hash() -> str:
        done = subprocess.run(
            ["bash", "tools/device_build.sh", "--hash"],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            check=True,
        )
        return done.stdout.strip()

    first = build_hash()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert build_hash() == first
    (tree / "mybackend" / "m.py").write_text("two\n")
    assert build_hash() == first
    (tree / "src_cpp" / "a.cpp").write_text("two\n")
    second = build_hash()
    assert second != first
    (tree / "mybackend" / "n.py").write_text("new module\n")
    assert build_hash() != second
    (tree / "CMakeLists.txt").write_text("project(y)\n")
    assert build_hash() not in (first, second)
