"""What each model's graphs leave to ATen, planned for CUDA on any machine.

    python -m benchmarks.aten_survey --models swin_t,llama_gqa --scenario training
    python -m benchmarks.aten_survey --zoo --scenario inference --out bench_out/survey

Mechanisms are judged on the whole zoo, and GPU time is scarce: this
answers "which ops does mybackend still hand to ATen, in which models"
without a GPU. Each model's workload (its tiny variant unless ``--full``;
fp32; the harness's inputs and, for training, its loss) runs once on the
CPU through mybackend's own path to the ATen graphs, with the rewrites that
only CUDA graphs take opened to it (Note [A CUDA compile on the CPU] in
benchmarks/cuda_simulation.py: CUDA's decompositions, the fused
cross-entropy, the joint graph's layout plan and padding, the min-cut
partition), and the graphs run eagerly. Each graph is then retraced
with fake CUDA tensors of the same sizes and strides, rewritten by the
per-graph passes and planned by the C++ core, as the GPU machine plans it.
Reported per model: the kernel groups of each graph by kind, and the ops
(shape views aside) that ATen sequences run.

``--dtype bfloat16`` runs the workload as the GPU harness does by default:
inference with bf16 weights and inputs, training with fp32 weights under
bf16 autocast. On the CPU that is CPU autocast, whose list of ops cast to
bf16 is close to CUDA's (matrix products, convolutions, attention) but not
the same (CUDA autocast runs layer norms in fp32, CPU autocast in bf16);
without it a training survey sees none of the casts autocast adds around
each product (Note [Norm outputs in 16 bits] acts on them).

Where the simulation differs from the GPU machine: without cuDNN,
FakeTensor's CUDA convolution returns NCHW outputs, so channels-last plans
of convolutional models are not the GPU's (docs/performance.md, the
``--as-cuda`` caveat), and a tiny variant's graphs are not its full
variant's where sizes decide (a matrix product's padding, a reduction's
split).
"""

from __future__ import annotations

import argparse
import collections
import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from functorch.compile import make_boxed_func
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend.aot as aot
from benchmarks.backends import Backend
from benchmarks.cuda_simulation import as_cuda
from benchmarks.models import ALL_MODELS, select_models
from benchmarks.report import markdown_table
from benchmarks.scenarios import Task, Workload
from mybackend import _C
from mybackend.lowering import lower
from mybackend.options import Options
from mybackend.passes.driver import PassContext, run_passes
from mybackend.passes.layout import placeholder_values
from mybackend.passes.pipeline import PER_GRAPH


@dataclass
class GraphPlan:
    """One aot graph's plan: kernel groups by kind, ATen-run ops by name."""

    kind: str
    groups: dict[str, int]
    aten_ops: dict[str, int]


@dataclass
class ModelSurvey:
    model: str
    scenario: str
    graphs: list[GraphPlan] = field(default_factory=list)
    error: str | None = None

    def aten_ops(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for g in self.graphs:
            total.update({f"{g.kind}: {op}": n for op, n in g.aten_ops.items()})
        return total


def on_fake_cuda(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` retraced with fake CUDA tensors shaped and strided like its
    placeholders' values; factory calls on the CPU move to CUDA."""
    gm = copy.deepcopy(gm)
    cpu = torch.device("cpu")
    for node in gm.graph.nodes:
        if node.kwargs.get("device") in (cpu, "cpu"):
            node.kwargs = {**node.kwargs, "device": torch.device("cuda")}
    gm.recompile()
    examples = placeholder_values(gm)
    with FakeTensorMode(allow_non_fake_inputs=True):
        args = [
            torch.empty_strided(e.shape, e.stride(), dtype=e.dtype, device="cuda") for e in examples
        ]
    return make_fx(gm, tracing_mode="fake")(*args)


def plan_graph(gm: torch.fx.GraphModule, kind: str, options: Options) -> GraphPlan:
    """``gm`` (an aot graph traced on the CPU) as mybackend plans it for CUDA."""
    cuda = on_fake_cuda(gm)
    ctx = PassContext(cuda, placeholder_values(cuda), kind, f"survey.{kind}", options)
    run_passes(PER_GRAPH, ctx)
    lowered = lower(ctx.gm, ctx.inputs())
    core_options = options.core_options(ctx.static_inputs)
    # The group floor (Note [A group is timed against its ATen form]) reads
    # the device when it compiles and chooses when it runs: the plan is the
    # same without it.
    core_options["group_floor"] = False
    report = _C.compile(lowered.graph, core_options, lowered.run_python_node).report()
    nodes = report["nodes"]
    groups: collections.Counter[str] = collections.Counter()
    aten: collections.Counter[str] = collections.Counter()
    for kernel in report["kernels"]:
        if kernel["kind"] == "aten_sequence":
            # Views (the capability registry's class) only re-describe
            # memory: a sequence of them launches nothing.
            launched = [nodes[n]["op"] for n in kernel["nodes"] if nodes[n]["op_class"] != "view"]
            aten.update(launched)
            if not launched:
                continue
        groups[kernel["kind"]] += 1
    return GraphPlan(kind, dict(groups), dict(aten))


def _capturing_backend(
    options: Options, plans: list[GraphPlan]
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    """A torch.compile backend that runs mybackend's path to the ATen graphs
    (the passes before aot_autograd, the decompositions, the joint graph's
    passes and partition) and plans each graph instead of compiling it; the
    graphs then run eagerly. Inside ``as_cuda()`` (Note [A CUDA compile on the
    CPU]) that path is a CUDA compile's."""

    def plan_instead(
        gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, kind: str, **_: Any
    ) -> Any:
        if all(isinstance(v, torch.Tensor) for v in placeholder_values(gm)):
            plans.append(plan_graph(gm, kind, options))
        else:  # a size or scalar input: dynamic shapes, which the retrace does not take
            plans.append(GraphPlan(f"{kind} (symbolic inputs, not planned)", {}, {}))
        return make_boxed_func(gm)

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        with mock.patch.object(aot, "compile_aten_graph", plan_instead):
            return aot.compile_with_aot(gm, example_inputs, options)

    return backend


def survey_model(
    model: str,
    scenario: str,
    *,
    full: bool = False,
    batch: int | None = None,
    dtype: str = "float32",
) -> ModelSurvey:
    """Plans every graph of one model's workload (Note in the module doc);
    ``dtype`` "bfloat16": the GPU harness's bf16 inference or bf16-autocast
    training."""
    spec = ALL_MODELS[model]
    if batch is None:
        training = scenario == "training"
        batch = spec.training_batch(not full) if training else (1 if full else 2)
    result = ModelSurvey(model, scenario)
    options = Options.from_user(None, {})
    backend = Backend("survey", {"backend": _capturing_backend(options, result.graphs)}, None)
    torch._dynamo.reset()
    try:
        task = Task(Workload(model, scenario, batch, dtype=dtype, tiny=not full), references=False)
        with as_cuda():
            task.runner(backend).first()
    except Exception as error:  # a model the survey cannot trace is a row, not a crash
        cause: BaseException = getattr(error, "inner_exception", None) or error
        while cause.__cause__ is not None:
            cause = cause.__cause__
        first_line = (str(cause).splitlines() or [""])[0]
        result.error = f"{type(cause).__name__}: {first_line[:200]}"
    finally:
        torch._dynamo.reset()
    return result


def report_lines(surveys: Sequence[ModelSurvey], top: int) -> list[str]:
    """A table of kernel groups per model and graph, then each model's most
    frequent ATen-run ops, then the ops summed over the models."""
    rows = []
    for s in surveys:
        if s.error:
            rows.append([s.model, s.scenario, "-", f"failed: {s.error}"])
        for g in s.graphs:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(g.groups.items()))
            rows.append([s.model, s.scenario, g.kind, kinds])
    lines = markdown_table(["model", "scenario", "graph", "kernel groups"], rows).splitlines()
    overall: collections.Counter[str] = collections.Counter()
    for s in surveys:
        ops = s.aten_ops()
        for op, n in ops.items():
            overall[op.split(": ", 1)[1]] += n
        if ops:
            lines.append("")
            lines.append(f"{s.model} ({s.scenario}), ops run by ATen:")
            lines += [f"  {n:4d}  {op}" for op, n in ops.most_common(top)]
    if overall:
        lines.append("")
        lines.append("All models, ops run by ATen:")
        lines += [f"  {n:4d}  {op}" for op, n in overall.most_common(top)]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.aten_survey", description=__doc__)
    p.add_argument("--models", help="comma-separated names or families (default: the zoo)")
    p.add_argument("--zoo", action="store_true", help="every zoo model")
    p.add_argument("--scenario", choices=("inference", "training"), default="inference")
    p.add_argument("--full", action="store_true", help="full-size variants (slower)")
    p.add_argument("--batch", type=int, help="default: 2 (tiny), 1 (full), training batches")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="bfloat16: as the GPU harness runs (bf16 inference, bf16-autocast training)",
    )
    p.add_argument("--top", type=int, default=12, help="ops listed per model")
    p.add_argument("--out", type=Path, help="also write survey.md here")
    args = p.parse_args(argv)
    models = select_models(["zoo"] if args.zoo or not args.models else args.models.split(","))
    surveys = []
    for model in models:
        print(f"surveying {model} ({args.scenario})", file=sys.stderr, flush=True)
        surveys.append(
            survey_model(model, args.scenario, full=args.full, batch=args.batch, dtype=args.dtype)
        )
    lines = report_lines(surveys, args.top)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "survey.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(s.error for s in surveys) else 0


if __name__ == "__main__":
    sys.exit(main())
