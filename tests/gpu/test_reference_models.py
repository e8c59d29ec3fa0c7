"""GPU-marked: the reference models, full size with random weights, against eager.

ResNet-50, ViT-B/16, BERT-base and GPT-2 small as the benchmarks build them
(benchmarks/models.py), in bf16: inference outputs, and the training step's
loss and every parameter gradient under autocast. Each is judged as the
benchmark harness judges it (benchmarks/common.py: PyTorch's ``same()`` at
bf16 tolerance plus a cosine similarity against an fp32 reference), with
strict mode on, so a graph that fell back to eager fails the test instead of
passing on eager's numbers.

GPT-2 and ViT training once aborted the process (torch's C++ exceptions could
not unwind through _C's frames, Note [Private libstdc++]); these cases are
the regression test for that too.
"""

from __future__ import annotations

import pytest

from benchmarks.backends import Backend
from benchmarks.common import check_accuracy, reset_dynamo
from benchmarks.scenarios import Task, Workload
from tests.testing import compiled_records, nodes_run_in_partitions

pytestmark = pytest.mark.gpu

MODELS = ["resnet50", "vit_b16", "bert_base", "gpt2"]
STRICT = Backend("mybackend-strict", {"backend": "mybackend", "options": {"strict": True}}, None)


@pytest.mark.parametrize("scenario", ["inference", "training"])
@pytest.mark.parametrize("model", MODELS)
def test_reference_model_matches_eager(model: str, scenario: str) -> None:
    reset_dynamo()
    task = Task(Workload(model, scenario, batch=2, device="cuda", dtype="bfloat16", tiny=False))
    runner = task.runner(STRICT)
    outputs, records = compiled_records(lambda: [t.cpu() for t in runner.check()])
    accuracy = check_accuracy(outputs, task.eager, task.reference, task.workload.tolerance)
    assert accuracy.passed, accuracy.reason
    assert records and all(r.core_report is not None for r in records), [
        r.fallback_reason for r in records
    ]
    if scenario == "training":
        assert {r.kind for r in records} >= {"forward", "backward"}
    assert nodes_run_in_partitions(records) > 0
