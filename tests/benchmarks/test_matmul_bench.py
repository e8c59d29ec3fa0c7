"""The matmul micro-benchmark's CPU-side pieces: its table and its GPU guard."""

from __future__ import annotations

import pytest
import torch

from benchmarks.micro import matmul


def test_table_reports_ms_tflops_and_fraction_of_ceiling() -> None:
    results = [
        matmul.MatmulResult("eager", 0.5, 77.3, 0.1, 1e-3),
        matmul.MatmulResult("cublaslt", status="error: RuntimeError: boom"),
    ]
    text = matmul.table(773.0, results)
    assert "8192x768 -> 3072" in text and "ceiling 773 TFLOP/s" in text
    assert "| eager | 0.500 | 77.3 | 10% | 1.0e-03 | ok |" in text
    assert "error: RuntimeError: boom" in text


def test_flop_count_is_the_gemm() -> None:
    assert matmul.FLOPS == 2 * 8192 * 768 * 3072


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU guard")
def test_main_skips_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert matmul.main([]) == 0
    assert "skipped" in capsys.readouterr().out


def test_timed_choices_mark_the_kept_candidate() -> None:
    choices = [
        {
            "signature": "sig",
            "candidates": [("algo 66 tile 24", 0.068), ("algo 66 tile 20", 0.061), ("b", -1.0)],
            "chosen": 1,
        }
    ]
    lines = matmul.timed_choices_text(choices).splitlines()
    assert lines == [
        "timed choice for sig:",
        "    0.0680 ms  algo 66 tile 24",
        "  * 0.0610 ms  algo 66 tile 20",
        "    no launch  b",
    ]
