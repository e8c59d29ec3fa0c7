"""Every Python name the docs give exists (issue 34, item 6: the docs named a
``mybackend.Error`` that the package never had).

Each ``mybackend.<name>[.<name>...]`` written in README.md or docs/ must
resolve: importing the longest module prefix, then getattr for the rest
(``mybackend.options`` is a submodule, ``mybackend.Options`` an attribute,
``mybackend._C.Error`` an attribute of the extension). ``mybackend.<channel>``
may also be a logger channel (``mybackend.aot``, docs/debugging.md). The same
holds for the extension's names written as ``_C.<name>``.

Not checked: file paths (``mybackend/aot.py``, ``benchmarks/...``), file
names ending in an extension, C++ names (``mybackend::Error``), and
docs/performance-history.md, whose dated sections name things as they were
on their date.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import mybackend
from mybackend import _C

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "docs" / "performance-history.md"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# Not preceded by a path or a longer name (src/mybackend.x, my_mybackend.x,
# -mybackend.x); a trailing dot (end of a sentence) is not part of the name.
_PACKAGE_NAME = re.compile(rf"(?<![\w/.\-])mybackend(?:\.{_IDENT})+")
_EXTENSION_NAME = re.compile(rf"(?<![\w/.\-])_C\.({_IDENT})")
_FILE_SUFFIXES = {"py", "pyi", "md", "so", "json", "txt", "ipynb", "cpp", "h", "toml", "log"}


def _doc_files() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [path for path in docs if path != HISTORY]


def _references(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    """Each name the pattern finds, with the places it was found."""
    found: dict[str, list[str]] = {}
    for path in _doc_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                name = match.group(1) if pattern.groups else match.group(0)
                if name.rsplit(".", 1)[-1] in _FILE_SUFFIXES:
                    continue  # a file name, such as x.py
                found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def resolves(dotted: str) -> bool:
    """Whether ``mybackend.a.b.c`` names a module or an attribute."""
    parts = dotted.split(".")
    obj: object = None
    for end in range(len(parts), 0, -1):  # the longest importable module prefix
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        rest = parts[end:]
        break
    else:
        return False
    for attribute in rest:
        if not hasattr(obj, attribute):
            return False
        obj = getattr(obj, attribute)
    return True


def _logger_channels() -> set[str]:
    from mybackend import _logging

    return {f"mybackend.{channel}" for channel in _logging.CHANNELS}


def test_the_docs_name_python_names() -> None:
    """A guard on the extraction itself: the public API is mentioned."""
    names = _references(_PACKAGE_NAME)
    assert "mybackend.explain" in names
    assert "mybackend.BackendFailure" in names


def test_every_package_name_in_the_docs_exists() -> None:
    channels = _logger_channels()
    missing = {
        name: places
        for name, places in _references(_PACKAGE_NAME).items()
        if name not in channels and not resolves(name)
    }
    assert not missing, "\n".join(f"{name}: {', '.join(p)}" for name, p in missing.items())


def test_every_extension_name_in_the_docs_exists() -> None:
    missing = {
        name: places
        for name, places in _references(_EXTENSION_NAME).items()
        if not hasattr(_C, name)
    }
    assert not missing, "\n".join(f"_C.{name}: {', '.join(p)}" for name, p in missing.items())


def test_there_is_no_package_level_error_class() -> None:
    """The package's exception is BackendFailure; the core's are _C.Error
    and _C.InternalError. ``mybackend.Error`` does not exist."""
    assert not hasattr(mybackend, "Error")
    assert issubclass(mybackend.BackendFailure, RuntimeError)
    assert issubclass(_C.InternalError, _C.Error)


@pytest.mark.parametrize(
    ("name", "exists"),
    [
        ("mybackend.options", True),  # a submodule
        ("mybackend.Options", True),  # an attribute
        ("mybackend.options.Options", True),
        ("mybackend._C.Error", True),
        ("mybackend.Error", False),
        ("mybackend.no_such_module.x", False),
    ],
)
def test_resolves(name: str, exists: bool) -> None:
    assert resolves(name) is exists
