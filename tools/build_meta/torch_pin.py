"""Wheel metadata: the torch the extension was built against (pyproject.toml).

A scikit-build-core dynamic-metadata provider ([[tool.dynamic-metadata]]).
mybackend._C links torch's C++ libraries, whose ABI changes between torch
minor versions, so a built wheel (and an editable install) depends on
``torch==<major>.<minor>.*`` of the torch that was imported at build time,
followed by the project's other dependencies (the ``requires`` setting).

It imports the torch of the build's interpreter: build with
--no-build-isolation (pip) or --no-isolation (python -m build), so that torch
is the installed one and no second torch is pulled into a build environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def torch_requirement(version: str) -> str:
    """``torch==2.11.*`` for ``2.11.0+cu130`` (local and pre-release parts dropped)."""
    release = version.split("+", 1)[0]
    parts = release.split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        raise ValueError(f"mybackend: cannot read a torch version from {version!r}")
    minor = "".join(ch for ch in parts[1] if ch.isdigit())
    return f"torch=={int(parts[0])}.{int(minor)}.*"


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:  # build isolation, or no torch installed
        raise RuntimeError(
            "mybackend builds against an installed torch, and none is importable here. "
            "Install torch first, then build without isolation: "
            "pip install --no-build-isolation . / python -m build --wheel --no-isolation"
        ) from exc
    extra = list(settings.get("requires", []))
    return {"dependencies": [torch_requirement(torch.__version__), *extra]}


def dynamic_wheel(settings: Mapping[str, Any]) -> dict[str, bool]:
    # An SDist does not fix the torch: a wheel built from it pins its own.
    return {"dependencies": True}
