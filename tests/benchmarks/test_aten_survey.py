"""benchmarks/aten_survey.py: which ops a model's graphs leave to ATen, planned
for CUDA on a machine without a GPU."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from benchmarks import aten_survey
from mybackend.options import Options


def _cat_then_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, y]).relu().view(-1) + 1


def test_a_graph_is_planned_as_on_cuda() -> None:
    gm = make_fx(_cat_then_relu, tracing_mode="fake")(torch.randn(2, 8), torch.randn(3, 8))
    plan = aten_survey.plan_graph(gm, "inference", Options.from_user(None, {}))
    assert plan.aten_ops == {"aten::cat.default": 1}  # the view is not counted
    assert plan.groups.get("pointwise") == 1  # relu and the add: one generated kernel


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def test_a_rotary_embeddings_concatenation_is_planned_inside_its_kernel(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Note [Concatenations in pointwise kernels], through the Python lowering
    # (the pieces' list argument) and the core on fake CUDA tensors.
    inputs = (torch.randn(2, 3, 5, 8), torch.randn(5, 8), torch.randn(5, 8))
    gm = make_fx(_rotary, tracing_mode="fake")(*inputs)
    plan = aten_survey.plan_graph(gm, "inference", Options.from_user(None, {}))
    assert plan.aten_ops == {} and plan.groups == {"pointwise": 1}, plan
    monkeypatch.setenv("MYBACKEND_FUSED_CATS", "0")
    plan = aten_survey.plan_graph(gm, "inference", Options.from_user(None, {}))
    assert plan.aten_ops.get("aten::cat.default") == 1, plan


def test_a_training_survey_plans_the_forward_and_the_backward() -> None:
    survey = aten_survey.survey_model("mlp", "training")
    assert survey.error is None
    assert [g.kind for g in survey.graphs] == ["forward", "backward"]
    assert all(g.groups.get("matmul", 0) > 0 for g in survey.graphs)
    lines = aten_survey.report_lines([survey], top=5)
    assert any(line.startswith("| mlp | training | backward |") for line in lines)


def test_a_bf16_training_survey_sees_autocasts_casts() -> None:
    """--dtype bfloat16: fp32 weights under bf16 autocast, as the GPU
    harness trains; the forward casts the weights for its products, which
    an fp32 survey never shows."""
    fp32 = aten_survey.survey_model("mlp", "training")
    bf16 = aten_survey.survey_model("mlp", "training", dtype="bfloat16")
    assert fp32.error is None and bf16.error is None, (fp32.error, bf16.error)

    def casts(survey: aten_survey.ModelSurvey) -> int:
        forward = survey.graphs[0]
        return forward.groups.get("cast_group", 0) + forward.aten_ops.get(
            "aten::_to_copy.default", 0
        )

    assert casts(fp32) == 0 and casts(bf16) > 0, (fp32.graphs[0], bf16.graphs[0])


def test_a_failing_model_is_a_row(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no trace here")

    monkeypatch.setattr(aten_survey, "plan_graph", broken)
    survey = aten_survey.survey_model("mlp", "inference")
    assert survey.error is not None and "no trace here" in survey.error
    assert aten_survey.main(["--models", "mlp"]) == 1


def test_a_graph_with_symbolic_inputs_is_listed_unplanned() -> None:
    plans: list[aten_survey.GraphPlan] = []
    backend = aten_survey._capturing_backend(Options.from_user(None, {}), plans)
    compiled = torch.compile(lambda x: x.relu() * 2, backend=backend, dynamic=True)
    compiled(torch.randn(3, 4))
    assert [p.kind for p in plans] == ["inference (symbolic inputs, not planned)"]


def test_the_survey_takes_the_rewrites_only_cuda_graphs_take() -> None:
    # Note [A CUDA compile on the CPU]: the cross-entropy loss and the training
    # batch norms are mybackend's fused ops, as on the GPU machine, not ATen's.
    survey = aten_survey.survey_model("resnet18", "training")
    assert survey.error is None
    ops = {op.split(": ", 1)[1] for op in survey.aten_ops()}
    assert "aten::gather.default" not in ops  # the loss's pick of the target logit
    assert not any("batch_norm" in op for op in ops), ops
    forward = next(g for g in survey.graphs if g.kind == "forward")
    assert forward.groups.get("norm", 0) > 0
