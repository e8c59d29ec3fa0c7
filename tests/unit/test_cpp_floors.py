"""The C++ core's floors (issue 34): each folder of src_cpp/ includes only
folders on lower floors, pybind11 only in bindings/, and no torch header
below runtime/ (the core library builds and tests without torch).
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src_cpp"

# Highest first; folders on one floor do not include each other.
FLOORS = [
    {"bindings"},
    {"pipeline"},
    {"runtime"},
    {"fusion"},
    {"partition", "capability"},
    {"codegen", "libs"},
    {"spec"},
    {"ir"},
    {"common"},
]
FLOOR_OF = {folder: level for level, floor in enumerate(FLOORS) for folder in floor}
INCLUDE = re.compile(r'^#include "([a-z_]+)/', re.MULTILINE)
TORCH = re.compile(r"^#include <(ATen|c10|torch)/", re.MULTILINE)


def _sources(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.suffix in {".h", ".cpp", ".cu"}]


def test_every_folder_has_a_floor() -> None:
    folders = {p.name for p in SRC.iterdir() if p.is_dir()}
    assert folders == set(FLOOR_OF), f"floors unknown for {sorted(folders ^ set(FLOOR_OF))}"


def test_includes_go_down_only() -> None:
    wrong = []
    for folder, level in FLOOR_OF.items():
        for path in _sources(SRC / folder):
            for target in INCLUDE.findall(path.read_text()):
                if target != folder and FLOOR_OF.get(target, -1) <= level:
                    wrong.append(f"{path.relative_to(SRC)} includes {target}/")
    assert not wrong, "\n".join(wrong)


def test_pybind11_only_in_bindings() -> None:
    wrong = [
        str(path.relative_to(SRC))
        for folder in FLOOR_OF
        if folder != "bindings"
        for path in _sources(SRC / folder)
        if "pybind11" in path.read_text()
    ]
    assert not wrong, wrong


def test_no_torch_below_runtime() -> None:
    # libs/ wraps cuBLASLt and cuDNN on torch tensors: a runtime-side floor
    # of its own (built into mybackend_runtime), like runtime/.
    below = [f for f, level in FLOOR_OF.items() if level > FLOOR_OF["runtime"] and f != "libs"]
    wrong = [
        str(path.relative_to(SRC))
        for folder in below
        for path in _sources(SRC / folder)
        if TORCH.search(path.read_text())
    ]
    assert not wrong, wrong
