"""The model zoo (benchmarks/zoo/), on the CPU: what it covers, every tiny
variant built and run, and a sample compiled by mybackend against eager.

The reference models keep their names and batches (their published figures
stay comparable); the zoo adds 40+ models in the same registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_queue
from benchmarks.backends import Backend
from benchmarks.cli import model_names, parse_args
from benchmarks.common import check_accuracy, dynamo_counts, reset_dynamo
from benchmarks.gpu_queue import model_steps, step_folder
from benchmarks.models import ALL_MODELS, FAMILIES, MODELS, ZOO, get_model, select_models
from benchmarks.scenarios import Task, Workload, loss_value, make_target, workloads
from benchmarks.spec import LOSSES

# What the zoo must cover, by family: every tag here is on at least one model
# of that family (issue 31, item 1).
REQUIRED_TAGS: dict[str, set[str]] = {
    "cnn": {
        "resnet", "resnext", "wide_resnet", "regnet", "densenet", "vgg", "mobilenet_v2",
        "mobilenet_v3", "efficientnet", "convnext", "inception",
    },
    "vision_transformer": {"vit", "deit", "swin", "beit", "levit", "mlp_mixer", "hybrid"},
    "encoder": {"bert", "roberta", "albert", "distilbert", "electra"},
    "decoder": {"gpt2", "llama", "gqa", "rope", "moe"},
    "encoder_decoder": {"t5", "bart", "whisper"},
    "other": {"rnn", "unet", "graph_break"},
}  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread, as --quick uses (steady beside other CPU work), and
    no compiled frame carried from one test to the next."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    reset_dynamo()
    yield
    reset_dynamo()
    torch.set_num_threads(threads)


def _tags(family: str) -> set[str]:
    return {tag for spec in ZOO.values() if spec.family == family for tag in spec.tags}


# --- the registry ---------------------------------------------------------------


def test_zoo_has_40_models_covering_every_family() -> None:
    assert len(ZOO) >= 40
    assert set(FAMILIES) == set(REQUIRED_TAGS)
    assert {spec.family for spec in ZOO.values()} == set(FAMILIES)
    for family, required in REQUIRED_TAGS.items():
        assert required <= _tags(family), (family, sorted(required - _tags(family)))
    # GPT-NeoX or OPT; an LSTM or a GRU.
    assert _tags("decoder") & {"gpt_neox", "opt"}
    assert _tags("other") & {"lstm", "gru"}
    # A Llama-style decoder with grouped-query attention and rotary positions.
    assert any({"llama", "gqa", "rope"} <= spec.tags for spec in ZOO.values())


def test_gqa_models_have_fewer_key_value_heads() -> None:
    for spec in ZOO.values():
        if "gqa" in spec.tags:
            config = getattr(spec.build(True), "model").config  # noqa: B009 (nn.Module attribute)
            assert config.num_key_value_heads < config.num_attention_heads, spec.name


def test_zoo_entries_declare_their_runs() -> None:
    for name, spec in ZOO.items():
        assert spec.name == name and spec.family in FAMILIES
        assert spec.loss in LOSSES and spec.optimizer == "adamw"
        assert spec.throughput_batch > 1 and spec.train_batch > 1
        assert spec.tiny_throughput_batch > 1 and spec.tiny_train_batch > 1
        assert spec.build.__doc__, f"{name}: say what the builder builds"
    assert set(ALL_MODELS) == set(MODELS) | set(ZOO)


def test_reference_models_are_unchanged() -> None:
    assert list(MODELS) == ["resnet50", "vit_b16", "bert_base", "gpt2", "mlp"]
    assert {n: s.train_batch for n, s in MODELS.items()} == dict(
        resnet50=64, vit_b16=64, bert_base=32, gpt2=16, mlp=256
    )
    rows = workloads(["resnet50"], ["inference", "training"], None, "cuda", "bfloat16", False)
    assert [(w.scenario, w.batch) for w in rows] == [
        ("inference", 1),
        ("inference", 32),
        ("training", 64),
    ]
    assert all(s.optimizer == "adam" and s.family == "reference" for s in MODELS.values())


def test_zoo_rows_use_each_models_batches() -> None:
    spec = get_model("resnet18")
    rows = workloads(["resnet18"], ["inference", "training"], None, "cuda", "bfloat16", False)
    assert [(w.scenario, w.batch) for w in rows] == [
        ("inference", 1),
        ("inference", spec.throughput_batch),
        ("training", spec.train_batch),
    ]
    tiny = workloads(["resnet18"], ["inference", "training"], None, "cpu", "float32", True)
    assert [w.batch for w in tiny] == [1, spec.tiny_throughput_batch, spec.tiny_train_batch]


def test_selection_by_family_and_keyword() -> None:
    cnn = [n for n, s in ZOO.items() if s.family == "cnn"]
    assert select_models(None) == list(MODELS)
    assert select_models(["zoo"]) == list(ZOO)
    assert select_models(["cnn", "gpt2", "resnet18"]) == [*cnn, "gpt2"]
    assert model_names(parse_args(["--family", "cnn", "--models", "gpt2"])) == ["gpt2", *cnn]
    assert model_names(parse_args(["--zoo"])) == list(ZOO)
    assert model_names(parse_args([])) == list(MODELS)
    with pytest.raises(SystemExit):
        model_names(parse_args(["--family", "resnet18"]))
    with pytest.raises(ValueError, match="family"):
        select_models(["no_such_model"])


def test_gpu_queue_takes_zoo_models_one_step_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert model_steps("encoder_decoder") == [
        f"model {n}" for n, s in ZOO.items() if s.family == "encoder_decoder"
    ]
    assert len(model_steps("zoo")) == len(ZOO)
    assert step_folder("model llama_gqa --batch 1") == "model-llama_gqa"

    # What gpu_run.sh's zoo step hands the queue, and what the queue then runs.
    queued: list[str] = []

    def fake_run_queue(steps: list[str], gpus: list[int], *_: object) -> list[str]:
        queued.extend(steps)
        return steps[len(gpus) :]  # the deadline left the rest unstarted

    monkeypatch.setattr(gpu_queue, "run_queue", fake_run_queue)
    monkeypatch.setattr(gpu_queue, "visible_gpus", lambda: [0, 1])
    argv = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]
    argv += ["--models", "t5_base,other", "--model-options=--no-warm-compile"]
    assert gpu_queue.main(argv) == 1  # models were left unstarted
    others = [n for n, s in ZOO.items() if s.family == "other"]
    assert queued == [f"model {n} --no-warm-compile" for n in ["t5_base", *others]]


# --- every tiny variant ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ZOO))
def test_tiny_variant_runs_on_cpu(name: str) -> None:
    """Builds the tiny variant, runs one fp32 forward in eval mode, then checks
    that training mode has no dropout left (two forwards under different seeds
    agree) and that the spec's loss backpropagates."""
    spec = ZOO[name]
    torch.manual_seed(0)
    model = spec.build(True).float()
    batch = spec.tiny_train_batch
    inputs = spec.make_inputs(batch, True, torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.eval()(*inputs)
    assert isinstance(out, torch.Tensor) and out.shape[0] == batch
    assert out.dtype == torch.float32 and bool(out.isfinite().all())

    model.train()
    torch.manual_seed(1)
    first = model(*inputs)
    torch.manual_seed(2)
    second = model(*inputs)
    torch.testing.assert_close(first, second, rtol=0, atol=0, msg=f"{name}: dropout left on")
    target = make_target(second.detach(), spec.loss, torch.Generator().manual_seed(0))
    loss = loss_value(second, target, spec.loss)
    loss.backward()
    assert bool(loss.isfinite())
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


# --- a sample through mybackend ---------------------------------------------------


STRICT = {"strict": True}


@pytest.mark.parametrize("scenario", ["inference", "training"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_mybackend_matches_eager_on_every_zoo_model(name: str, scenario: str) -> None:
    """Every zoo model's tiny variant, as the harness judges a backend
    (check_accuracy against eager and the fp64 reference): inference outputs,
    or the loss and every gradient of one training step; then the optimizer
    step runs on the compiled model. Strict: a failure inside the backend
    fails the test instead of running the graph eagerly (about 3 minutes
    for all 46 models on CI's two cores)."""
    backend = Backend("mybackend-strict", {"backend": "mybackend", "options": STRICT}, None)
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    batch = 2 if scenario == "inference" else ZOO[name].tiny_train_batch
    task = Task(Workload(name, scenario, batch))
    runner = task.runner(backend)
    runner.first()
    outputs = [t.cpu() for t in runner.check()]
    acc = check_accuracy(outputs, task.eager, task.reference, task.workload.tolerance)
    assert acc.passed, f"{name} {scenario}: {acc.reason} (cosine {acc.cosine})"
    if "graph_break" in ZOO[name].tags:  # it does break the graph, and compiles the pieces
        counts = dynamo_counts()
        assert counts["graph_breaks"] > 0 and counts["graphs"] > 1, counts
    runner.step()
