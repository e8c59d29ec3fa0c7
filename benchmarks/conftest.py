"""pytest options of the benchmark tests (``pytest benchmarks/ --benchmark-only``).

Without options the parameter set is small on a CPU (tiny models, inference at
batch 1 and a training step, cheap backends) and full on a GPU (every model,
scenario and default backend). Each option takes a comma list.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mybackend benchmarks")
    group.addoption(
        "--bench-models",
        help="models, 'zoo' or zoo families (default: the five reference models)",
    )
    group.addoption("--bench-backends", help="backends (default: per device, see backends.py)")
    group.addoption("--bench-scenarios", help="inference,training (default: both)")
    group.addoption("--bench-batch", help="batch sizes overriding each scenario's own")
