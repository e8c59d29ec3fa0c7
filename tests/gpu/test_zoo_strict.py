"""GPU-marked: a sample of zoo models (benchmarks/zoo/) through mybackend in
strict mode on CUDA in bf16, judged as the benchmark harness judges a row:
inference outputs, or one training step's loss and every gradient, against
eager and the fp32 reference (issue 31's tests). Strict mode makes any
failure inside the backend an error here instead of a quiet eager run.

The sample covers the patterns the zoo found slow or fragile: depthwise 7x7
convolutions with LayerNorm over permuted channels, shifted-window attention,
squeeze-excitation with hard-swish and SiLU, grouped-query attention with
rotary positions, partial rotary embeddings (slices whose gradients are
scattered into zeros), relative position bias, an audio encoder's convolutions, a
mixture of experts. Tiny variants keep the whole sample within minutes.
(Channel-concatenating nets run in fp32: tests/gpu/test_concatenation.py.)
"""

from __future__ import annotations

import pytest

from benchmarks.backends import Backend
from benchmarks.common import check_accuracy
from benchmarks.models import ZOO
from benchmarks.scenarios import Task, Workload

pytestmark = pytest.mark.gpu

SAMPLE = (
    "convnext_tiny",
    "swin_t",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "llama_gqa",
    "pythia_160m",
    "t5_base",
    "whisper_base",
    "mixtral_moe",
)
STRICT = Backend("mybackend-strict", {"backend": "mybackend", "options": {"strict": True}}, None)


@pytest.mark.parametrize("scenario", ["inference", "training"])
@pytest.mark.parametrize("name", SAMPLE)
def test_zoo_sample_is_accurate_in_strict_mode(name: str, scenario: str) -> None:
    spec = ZOO[name]
    batch = 2 if scenario == "inference" else spec.tiny_train_batch
    task = Task(Workload(name, scenario, batch, device="cuda", dtype="bfloat16", tiny=True))
    runner = task.runner(STRICT)
    runner.first()
    outputs = [t.cpu() for t in runner.check()]
    accuracy = check_accuracy(outputs, task.eager, task.reference, task.workload.tolerance)
    assert accuracy.passed, f"{name} {scenario}: {accuracy.reason} (cosine {accuracy.cosine})"
    runner.step()
