"""Docs point only inside the repository: a user's clone has nothing else
(issue 35: performance.md and benchmarks/README.md named a steering file)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_OUTSIDE = re.compile(r"/work/|\.\./shared|shared/reference-figures")


def test_no_doc_names_a_path_outside_the_repository() -> None:
    docs = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md")]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in docs
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_readme_links_the_notebook() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/examples/mybackend_tour.ipynb" in readme
    assert (ROOT / "docs/examples/mybackend_tour.ipynb").exists()
