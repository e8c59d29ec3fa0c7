"""mybackend/_C.pyi against what the extension really binds (issue 34).

The stub is the one page that lists the C++ surface; mypy and readers trust
it, so a name bound in src_cpp/bindings/ but missing here (or the reverse) is
drift this test catches: module-level functions and classes, and the public
members of each bound class.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import mybackend._C as C

STUB = Path(__file__).resolve().parents[2] / "mybackend" / "_C.pyi"


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    top: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.ClassDef):
            top.add(node.name)
            names: set[str] = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name != "__init__":
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            members[node.name] = names
    return top, members


def _bound_names() -> set[str]:
    return {n for n in dir(C) if not n.startswith("__")}


def _public_members(cls: type) -> set[str]:
    # pybind11 adds _pybind11_conduit_v1_ to every class: not ours to stub.
    own = {n for n in vars(cls) if not n.startswith("_")}
    return own


def test_every_bound_name_is_in_the_stub() -> None:
    top, _ = _stub_names()
    missing = _bound_names() - top
    assert not missing, f"bound by the extension but missing from _C.pyi: {sorted(missing)}"


def test_every_stubbed_name_is_bound() -> None:
    top, _ = _stub_names()
    extra = top - _bound_names()
    assert not extra, f"in _C.pyi but not bound by the extension: {sorted(extra)}"


def test_class_members_match() -> None:
    _, members = _stub_names()
    for name, stubbed in members.items():
        cls = getattr(C, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        bound = _public_members(cls)
        assert stubbed == bound, (
            f"{name}: missing from the stub {sorted(bound - stubbed)}, "
            f"not bound {sorted(stubbed - bound)}"
        )
