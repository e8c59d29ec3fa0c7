"""Makes the repository's ``benchmarks`` package and this folder importable.

This folder has no ``__init__.py`` on purpose: as a package it would be named
``benchmarks`` too and shadow the package under test.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
for path in (str(REPO_ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)
