"""benchmarks/micro/small_kernels.py on CPU: the graphs compute what their
names say, variants parse or fail with the knob named, and the runner
refuses to measure without a GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.micro import small_kernels as sk


def _branches(case: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    args = sk.make_inputs(
        (2, 8, 3, 3), torch.device("cpu"), torch.float32, torch.Generator().manual_seed(0)
    )
    return args, sk.graph(sk.CASES[case])(*args)


def test_every_graph_has_one_branch_per_five_arguments() -> None:
    for case in sk.CASES:
        args, out = _branches(case)
        assert len(args) == 5 * sk.BRANCHES and len(out) == sk.BRANCHES
        assert args[0].is_contiguous(memory_format=torch.channels_last)
        assert all(v.min() > 0 for v in args[2::5])  # variances


def test_hardswish_written_by_multiplying_is_hardswish() -> None:
    args, by_division = _branches("bn_hardswish")
    _, by_multiplying = _branches("bn_hardswish_mul")
    for a, b in zip(by_division, by_multiplying, strict=True):
        torch.testing.assert_close(a, b)
    x, m, v, w, b = args[:5]
    expected = F.relu(
        (x - m.view(1, -1, 1, 1)) / torch.sqrt(v.view(1, -1, 1, 1) + sk.EPS) * w.view(1, -1, 1, 1)
        + b.view(1, -1, 1, 1)
    )
    torch.testing.assert_close(_branches("bn_relu")[1][0], expected)


def test_variants_parse_or_name_the_bad_item() -> None:
    assert sk.parse_variant("") == {}
    assert sk.parse_variant("pw_block=64, pw_fast_divisors=0") == {
        "pw_block": 64,
        "pw_fast_divisors": 0,
    }
    with pytest.raises(ValueError, match="'pw_block'"):
        sk.parse_variant("pw_block")
    with pytest.raises(ValueError, match="'pw_block=x'"):
        sk.parse_variant("pw_block=x")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_measuring_needs_a_gpu() -> None:
    with pytest.raises(RuntimeError, match="need a CUDA GPU"):
        sk.run(["scale"], [])


def test_unknown_cases_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sk.main(["no_such_case"])
    assert "unknown case(s) no_such_case" in capsys.readouterr().err
