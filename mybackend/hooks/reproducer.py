"""Writes a standalone reproducer when compiling a graph fails and a dump
folder is set: the graph's code (torch.fx, as an ``nn.Module`` named
``Repro``), the specs of its inputs (shapes, strides, dtypes, devices) and
the options, as one script, ``<graph>.repro.py``. The script runs
mybackend/debug/repro.py's ``run_reproducer``, the tool that compiles the
graph again.
"""

from __future__ import annotations

import pprint
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._dynamo.debug_utils import NNModuleToString

TEMPLATE = '''"""mybackend reproducer for {name} ({kind}).

Failure: {reason}

Run: python {filename}
"""
import torch
from torch import device, tensor  # noqa: F401  (used by the graph code)
from torch.nn import *  # noqa: F401,F403

from mybackend.debug.repro import run_reproducer

inf, nan = float("inf"), float("nan")

{module}

# (kind, shape, stride, dtype, device, requires_grad) per tensor; ("int", value) per SymInt.
INPUTS = {inputs}
OPTIONS = {options}

if __name__ == "__main__":
    run_reproducer(Repro(), INPUTS, OPTIONS, name={name!r}, kind={kind!r})
'''


def _hint(value: Any) -> int:
    if isinstance(value, torch.SymInt):
        hint = value.node.hint
        if hint is None:
            raise ValueError(f"symbolic size {value} has no concrete hint")
        return int(hint)
    return int(value)


def input_spec(value: Any) -> tuple[Any, ...]:
    """A printable description of one graph input, enough to rebuild one like it."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(_hint(s) for s in value.shape),
            tuple(_hint(s) for s in value.stride()),
            str(value.dtype).removeprefix("torch."),
            str(value.device),
            bool(value.requires_grad),
        )
    if isinstance(value, torch.SymInt | int) and not isinstance(value, bool):
        return ("int", _hint(value))
    if isinstance(value, torch.SymFloat | float):
        return ("float", float(value.node.hint if isinstance(value, torch.SymFloat) else value))
    if isinstance(value, bool):
        return ("bool", value)
    raise ValueError(f"cannot describe a graph input of type {type(value).__name__}")


def reproducer_source(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: dict[str, Any],
    *,
    name: str,
    kind: str,
    reason: str,
) -> str:
    """The text of a standalone script that compiles ``gm`` again."""
    if not NNModuleToString.can_convert_to_string(gm):
        raise ValueError("the graph holds modules or constants that cannot be written as code")
    return TEMPLATE.format(
        name=name,
        kind=kind,
        reason=reason.replace('"""', "'''"),
        filename=f"{name}.repro.py",
        module=NNModuleToString.convert(gm).strip(),
        inputs=pprint.pformat([input_spec(v) for v in example_inputs], width=96),
        options=pprint.pformat(options, width=96),
    )


def write_reproducer(
    folder: str,
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: dict[str, Any],
    *,
    name: str,
    kind: str,
    reason: str,
) -> str:
    """Writes ``<folder>/<name>.repro.py`` and returns its path."""
    text = reproducer_source(gm, example_inputs, options, name=name, kind=kind, reason=reason)
    path = Path(folder) / f"{name}.repro.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)
