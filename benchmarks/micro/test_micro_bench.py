"""The kernel micro-benchmarks as pytest-benchmark tests (GPU only).

One test per (case, backend), grouped per case; ``extra_info`` holds the
roofline floor and the fraction of it reached (floor / median time).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from benchmarks.backends import resolve
from benchmarks.common import rel_error, reset_dynamo, synchronize
from benchmarks.micro.bench import DEFAULT_BACKENDS
from benchmarks.micro.cases import CASES
from benchmarks.micro.roofline import Ceilings, floor, measure_ceilings

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@functools.lru_cache(maxsize=1)
def _ceilings() -> Ceilings:
    ceilings = measure_ceilings(torch.device("cuda"))
    assert ceilings is not None
    return ceilings


@pytest.mark.parametrize("backend_name", DEFAULT_BACKENDS)
@pytest.mark.parametrize("case_name", list(CASES))
def test_micro(benchmark: Any, case_name: str, backend_name: str) -> None:
    case, backend = CASES[case_name], resolve(backend_name)
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    reset_dynamo()
    device = torch.device("cuda")
    inputs = case.make_inputs(device, torch.Generator().manual_seed(0))
    fn = backend.compile(case.fn)
    err = rel_error(fn(*inputs).float(), case.reference(inputs))

    def call() -> None:
        fn(*inputs)
        synchronize(device)

    benchmark.group = f"micro/{case_name}"
    benchmark.pedantic(call, rounds=50, iterations=1, warmup_rounds=5)
    bound = floor(case.bytes_moved, case.flops, _ceilings())
    median_ms = benchmark.stats.stats.median * 1e3
    benchmark.extra_info.update(
        floor_ms=bound.ms, bound=bound.bound, rel_error=err, roofline_fraction=bound.ms / median_ms
    )
    assert err < 2e-2, f"relative error {err:.2e} against fp32 eager"
