"""Standalone reproducers for graphs that failed to compile: what their
scripts run.

When compiling an ATen graph fails and a dump folder is set, the graph's code
(torch.fx, as an ``nn.Module`` named ``Repro``), the specs of its inputs
(shapes, strides, dtypes, devices) and the options are written as one script,
``<graph>.repro.py`` (mybackend/hooks/reproducer.py). Running it re-traces
the graph on random inputs of those specs and compiles it with mybackend in
strict mode (``run_reproducer``), so the failure is raised again with its
full traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend.aot import compile_aten_graph
from mybackend.options import Options


def make_input(spec: Sequence[Any]) -> Any:
    """A random input matching ``spec`` (see input_spec)."""
    kind = spec[0]
    if kind != "tensor":
        return spec[1]
    _, shape, stride, dtype_name, device, requires_grad = spec
    dtype = getattr(torch, dtype_name)
    out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        out.copy_(torch.randn(shape, dtype=dtype, device=device))
    elif dtype == torch.bool:
        out.copy_(torch.rand(shape, device=device) > 0.5)
    else:
        out.copy_(torch.randint(0, 8, shape, dtype=dtype, device=device))
    return out.requires_grad_(requires_grad)


def run_reproducer(
    module: torch.nn.Module,
    specs: Sequence[Sequence[Any]],
    options: dict[str, Any],
    *,
    name: str = "repro",
    kind: str = "inference",
) -> None:
    """Re-traces ``module`` to an ATen graph and compiles it in strict mode.

    Raises the compile failure when it reproduces; prints a line otherwise.
    """
    inputs = [make_input(spec) for spec in specs]
    with torch.no_grad():
        gm = make_fx(module, tracing_mode="fake")(*inputs)
    parsed = Options.from_user(None, {**options, "strict": True, "background_compile": False})
    compiled = compile_aten_graph(gm, inputs, name=name, kind=kind, options=parsed)
    compiled(list(inputs))
    print(f"mybackend reproducer: {name} compiled and ran; the failure did not reproduce")
