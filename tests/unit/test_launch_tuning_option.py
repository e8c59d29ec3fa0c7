"""The launch tuning as a compile option (issue 34, Note [Tuning in the
specs]): the option and the MYBACKEND_<KNOB> variables reach each generated
kernel's spec, and so its source and cache key; two compiles of one process
can differ in it. Traced with fake CUDA tensors: planning and emitting need
no GPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C, Options
from mybackend.lowering import lower

pytestmark = pytest.mark.skipif(
    not _C.cuda_enabled(), reason="a build without CUDA plans no kernels"
)


def _pointwise(options: dict[str, Any]) -> dict[str, Any]:
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, 8, device="cuda")
    lowered = lower(make_fx(lambda x: (x * 2).exp(), tracing_mode="fake")(x), [])
    core = Options.from_user(None, options).core_options()
    compiled = _C.compile(lowered.graph, core, lowered.run_python_node)
    kernels = [k for k in compiled.report()["kernels"] if k["kind"] == "pointwise"]
    assert len(kernels) == 1, kernels
    return kernels[0]


def _clear_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in ("PW_BLOCK", "PW_VEC_PER_THREAD", "PW_BLOCKS_PER_SM"):
        monkeypatch.delenv(f"MYBACKEND_{knob}", raising=False)


def test_default_tuning_keeps_the_spec_text(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_knobs(monkeypatch)
    kernel = _pointwise({})
    assert "threads=128" in kernel["spec"] and "tuning=" not in kernel["spec"], kernel["spec"]


def test_the_option_reaches_the_spec_and_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_knobs(monkeypatch)
    kernel = _pointwise({"launch_tuning": {"pw_block": 256, "pw_vec_per_thread": 2}})
    assert "threads=256" in kernel["spec"], kernel["spec"]
    assert "pw_vec_per_thread=2" in kernel["spec"], kernel["spec"]
    assert "pw_vec_per_thread=2" in kernel["source"]  # the source is the cache key's input
    assert kernel["source"] != _pointwise({})["source"]


def test_the_environment_sets_a_knob_and_the_option_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clear_knobs(monkeypatch)
    monkeypatch.setenv("MYBACKEND_PW_BLOCK", "512")
    assert "threads=512" in _pointwise({})["spec"]
    assert "threads=64" in _pointwise({"launch_tuning": {"pw_block": 64}})["spec"]


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ({"pw_blok": 256}, ValueError, "unknown launch tuning knob 'pw_blok'"),
        ({"pw_block": 100}, ValueError, "takes one of 64, 128, 256, 512, 1024"),
        ({"pw_block": True}, TypeError, "launch_tuning"),
        ("pw_block", TypeError, "launch_tuning"),
    ],
)
def test_bad_knobs_are_refused_with_the_reason(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Options.from_user(None, {"launch_tuning": value})
