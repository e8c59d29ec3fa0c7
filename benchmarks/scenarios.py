"""Scenarios: what one benchmark row runs, independent of the backend.

A ``Workload`` names a row (model, scenario, batch, device, precision). ``prepare``
builds its model once (seeded, fp32, on the CPU), its inputs, and the two
references the accuracy check needs: the eager module at the run's precision and
the same computation in higher precision. A ``Task`` then hands each backend a
fresh copy of the model through ``Task.runner``.

* ``inference``: weights and inputs in the run dtype (bf16 on a GPU), eval mode,
  under ``torch.no_grad``; one call is one step. Batch 1 and the model's
  throughput batch (32 for the reference models).
* ``training``: fp32 weights, forward and loss under bf16 autocast on a GPU,
  ``loss.backward()``, ``optimizer.step()`` (Adam for the reference models,
  AdamW for the zoo). The module handed to the backend is the model plus its
  loss; the optimizer step runs eagerly for every backend.

On the CPU (``--quick``) both scenarios run in fp32 without autocast and the
high-precision reference is fp64.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.backends import Backend
from benchmarks.common import clone_tensors
from benchmarks.models import ModelSpec, get_model

SCENARIOS = ("inference", "training")
SEED = 0


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark row, measured for every selected backend."""

    model: str
    scenario: str
    batch: int
    device: str = "cpu"
    dtype: str = "float32"
    tiny: bool = True

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)  # type: ignore[no-any-return]

    @property
    def reference_dtype(self) -> torch.dtype:
        """fp32 for low-precision runs, fp64 for fp32 runs."""
        return torch.float64 if self.torch_dtype == torch.float32 else torch.float32

    @property
    def tolerance(self) -> float:
        """``same()``'s tol: as PyTorch's harness, looser for bf16 and for training."""
        if self.torch_dtype != torch.float32:
            return 1e-2
        return 1e-3 if self.scenario == "training" else 1e-4


@dataclasses.dataclass
class Runner:
    """What the harness calls for one backend: the first (compiling) call, a
    call whose outputs are checked, and the timed step."""

    first: Callable[[], Any]
    check: Callable[[], list[torch.Tensor]]
    step: Callable[[], Any]


class TrainModule(nn.Module):
    """The model and its loss: ``forward(*inputs, target) -> scalar loss``."""

    def __init__(self, model: nn.Module, loss: str) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        *inputs, target = args
        return loss_value(self.model(*inputs), target, self.loss)


def loss_value(out: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """Cross entropy over the last dim ("ce"), mean squared error ("mse") or the
    mean square of the output ("square", ``target`` unused), in >= fp32."""
    out = out.to(torch.promote_types(out.dtype, torch.float32))
    if kind == "ce":
        return F.cross_entropy(out.flatten(0, -2), target.flatten())
    if kind == "square":
        return out.pow(2).mean()
    return F.mse_loss(out, target.to(out.dtype))


def make_target(out: torch.Tensor, kind: str, gen: torch.Generator) -> torch.Tensor:
    """A random target shaped for ``loss_value`` (on the CPU); a 0-d zero for "square"."""
    if kind == "ce":
        return torch.randint(0, out.shape[-1], tuple(out.shape[:-1]), generator=gen)
    if kind == "square":
        return torch.zeros(())
    return torch.randn(tuple(out.shape), generator=gen)


def _cast(
    inputs: tuple[torch.Tensor, ...], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """Moves inputs to ``device``, casting floating ones to ``dtype``."""
    return tuple(
        t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device) for t in inputs
    )


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    """fp32 matmuls and convolutions in full fp32 (cuDNN allows TF32 by default)."""
    matmul = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul


def _mark_step() -> None:
    """Tells CUDA-graph trees a new iteration begins (harmless for other backends)."""
    torch.compiler.cudagraph_mark_step_begin()


class Task:
    """A prepared workload: base model, inputs and (unless ``references`` is
    False, as for a bare first-call measurement) the two references."""

    def __init__(self, workload: Workload, references: bool = True) -> None:
        self.workload = workload
        self.spec: ModelSpec = get_model(workload.model)
        gen = torch.Generator().manual_seed(SEED)
        torch.manual_seed(SEED)
        self.base = self.spec.build(workload.tiny).float()
        self.cpu_inputs = self.spec.make_inputs(workload.batch, workload.tiny, gen)
        self.target: torch.Tensor | None = None
        self.reference: list[torch.Tensor] = []
        self.eager: list[torch.Tensor] = []
        if self.training:
            self.target = self._make_target(gen)
        if references:
            # Both live on the CPU so that they do not count in a backend's peak.
            self.reference = [t.cpu() for t in self._run_reference()]
            self.eager = [t.cpu() for t in self.runner(Backend("eager", None, "eager")).check()]

    @property
    def device(self) -> torch.device:
        return self.workload.torch_device

    @property
    def training(self) -> bool:
        return self.workload.scenario == "training"

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.workload.torch_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.workload.torch_dtype)

    def _make_target(self, gen: torch.Generator) -> torch.Tensor:
        """A random training target shaped like the model's output (one eager forward)."""
        model = copy.deepcopy(self.base).to(self.device, self.workload.torch_dtype)
        with torch.no_grad():
            shape = model(*_cast(self.cpu_inputs, self.device, self.workload.torch_dtype)).shape
        return make_target(torch.empty(shape), self.spec.loss, gen)

    def _run_reference(self) -> list[torch.Tensor]:
        """Outputs (inference) or loss and gradients (training) in high precision."""
        with _no_tf32():
            return self._reference_outputs()

    def _reference_outputs(self) -> list[torch.Tensor]:
        dtype = self.workload.reference_dtype
        model = copy.deepcopy(self.base).to(self.device, dtype)
        inputs = _cast(self.cpu_inputs, self.device, dtype)
        if not self.training:
            with torch.no_grad():
                return clone_tensors(model.eval()(*inputs))
        assert self.target is not None
        out = model.train()(*inputs)
        loss = loss_value(out, self.target.to(self.device), self.spec.loss)
        loss.backward()
        return [loss.detach().clone(), *_grads(model)]

    def runner(self, backend: Backend) -> Runner:
        """A fresh model copy compiled with ``backend``, wrapped as a Runner."""
        if self.training:
            return self._training_runner(backend)
        model = copy.deepcopy(self.base).to(self.device, self.workload.torch_dtype).eval()
        inputs = _cast(self.cpu_inputs, self.device, self.workload.torch_dtype)
        compiled = backend.compile(model)

        def call() -> Any:
            _mark_step()
            with torch.no_grad():
                return compiled(*inputs)

        return Runner(first=call, check=lambda: clone_tensors(call()), step=call)

    def _training_runner(self, backend: Backend) -> Runner:
        model = copy.deepcopy(self.base).to(self.device).train()
        module = TrainModule(model, self.spec.loss)
        optimizer_class = torch.optim.AdamW if self.spec.optimizer == "adamw" else torch.optim.Adam
        optimizer = optimizer_class(model.parameters(), lr=1e-4)
        assert self.target is not None
        args = (*_cast(self.cpu_inputs, self.device, torch.float32), self.target.to(self.device))
        compiled = backend.compile(module)

        def forward_backward() -> torch.Tensor:
            _mark_step()
            optimizer.zero_grad(set_to_none=True)
            with self._autocast():
                loss = compiled(*args)
            loss.backward()
            return loss  # type: ignore[no-any-return]

        def check() -> list[torch.Tensor]:
            loss = forward_backward()
            return [loss.detach().clone(), *_grads(model)]

        def step() -> None:
            forward_backward()
            optimizer.step()

        return Runner(first=forward_backward, check=check, step=step)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    """Copies of the gradients the parameters received, in registration order."""
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def workloads(
    models: list[str],
    scenarios: list[str],
    batches: list[int] | None,
    device: str,
    dtype: str,
    tiny: bool,
) -> list[Workload]:
    """Every row of a run: inference at batch 1 and each model's throughput batch,
    training at its training batch, unless ``batches`` overrides both."""
    rows = []
    for name in models:
        spec = get_model(name)
        for scenario in scenarios:
            if scenario not in SCENARIOS:
                raise ValueError(f"unknown scenario {scenario!r}; choose from {SCENARIOS}")
            own = (
                spec.inference_batches(tiny)
                if scenario == "inference"
                else (spec.training_batch(tiny),)
            )
            chosen = batches or list(own)
            rows += [Workload(name, scenario, b, device, dtype, tiny) for b in chosen]
    return rows
