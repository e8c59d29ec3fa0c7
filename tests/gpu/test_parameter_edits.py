"""GPU-marked: a compiled module never computes with old weights (issue 32,
item 2), on CUDA in fp32 and bf16, with and without CUDA graphs.

The cases of tests/models/test_parameter_edits.py (see its docstring) on
CUDA: a conv + batch-norm CNN (ConvBN, and torchvision's ResNet-18 when
installed) whose inference graph gets channels-last weight copies and
batch-norm scale and shift; an MLP whose misaligned 16-bit products get
padded weights (Note [Aligned matrix products]); a Linear stack under
``torch.autocast("cuda", dtype=torch.bfloat16)`` whose weights are cast. In
``mode="reduce-overhead"`` (passed as the options it stands for, beside
strict mode) the third call before the edit replays a CUDA graph that reads
the parameters at their captured addresses, and an in-place edit keeps
those addresses: the replay must read the new values.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.models.test_parameter_edits import (
    EDITS,
    VERSION_COUNTED_EDITS,
    Edit,
    ModelCase,
    check_edit,
    conv_bn,
    has_batch_norm,
    mlp,
)

pytestmark = pytest.mark.gpu

MODES = {"default": None, "reduce-overhead": "reduce-overhead"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18(num_classes=10)


def _misaligned_mlp() -> nn.Module:
    # 100 bf16 elements are 200 bytes, not a multiple of 16: the first
    # product's weight gains rows (hoisted in the opt-in mode); 1024 rows of
    # input make the padding worth its copy.
    return mlp(width=64, hidden=100)


GPU_MODELS = {
    "conv_bn": ModelCase(conv_bn, lambda: torch.randn(4, 3, 16, 16)),
    "resnet18": ModelCase(_resnet18, lambda: torch.randn(2, 3, 64, 64), lr=0.01),
    "mlp": ModelCase(_misaligned_mlp, lambda: torch.randn(1024, 64)),
}
AUTOCAST_MODEL = ModelCase(mlp, lambda: torch.randn(64, 32), autocast=torch.bfloat16)


def _to_other_dtype(model: nn.Module, compiled: Any, x: torch.Tensor, case: ModelCase) -> None:
    other = torch.bfloat16 if next(model.parameters()).dtype == torch.float32 else torch.float32
    model.to(other)


# On CUDA, `half` is fp16 itself; a conversion between the two dtypes under
# test is added.
GPU_EDITS = {
    **EDITS,
    "to_other_dtype": Edit("to_other_dtype", _to_other_dtype, True, changes_output=False),
}


def _has_batch_norm(model: str) -> bool:
    if model == "resnet18":
        return True
    return has_batch_norm(GPU_MODELS[model].make())


def _cases(edits: list[str], models: list[tuple[str, str]]) -> list[Any]:
    return [
        pytest.param(model, dtype, mode, edit, id=f"{model}-{dtype}-{mode}-{edit}")
        for model, dtype in models
        for mode in MODES
        for edit in edits
        if not GPU_EDITS[edit].needs_batch_norm or _has_batch_norm(model)
    ]


_ALL_MODELS = [(model, dtype) for model in GPU_MODELS for dtype in DTYPES]


@pytest.mark.parametrize(("model", "dtype", "mode", "edit"), _cases(sorted(GPU_EDITS), _ALL_MODELS))
def test_compiled_module_follows_weight_edits(model: str, dtype: str, mode: str, edit: str) -> None:
    """Default options (no hoisting): every edit is seen, ``.data`` ones too."""
    records = check_edit(GPU_MODELS[model], GPU_EDITS[edit], "cuda", DTYPES[dtype], MODES[mode])
    stages = {s for r in records for s, _ in r.stage_times}
    assert "hoisting" not in stages, "hoist_parameter_work is opt-in"


_AUTOCAST_EDITS = [e for e in sorted(GPU_EDITS) if not GPU_EDITS[e].needs_batch_norm]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("edit", _AUTOCAST_EDITS)
def test_autocast_linear_follows_weight_edits(mode: str, edit: str) -> None:
    """fp32 weights cast to bf16 by autocast on every call."""
    check_edit(AUTOCAST_MODEL, GPU_EDITS[edit], "cuda", torch.float32, MODES[mode])


_OPT_IN_EDITS = [*VERSION_COUNTED_EDITS, "to_other_dtype"]
# Models whose inference graph hoists something (fp32 products are aligned:
# the fp32 MLP has nothing to hoist).
_HOISTING_MODELS = [("conv_bn", "fp32"), ("conv_bn", "bf16"), ("mlp", "bf16")]


def _check_opt_in(case: ModelCase, edit: str, dtype: torch.dtype, mode: str) -> None:
    options = {"hoist_parameter_work": True}
    records = check_edit(case, GPU_EDITS[edit], "cuda", dtype, MODES[mode], options=options)
    hoisted = {s for r in records if r.kind == "inference" for s, _ in r.stage_times}
    assert "hoisting" in hoisted, "the case must hoist something to test the opt-in mode"


@pytest.mark.parametrize(
    ("model", "dtype", "mode", "edit"), _cases(_OPT_IN_EDITS, _HOISTING_MODELS)
)
def test_opt_in_hoisting_follows_version_counted_edits(
    model: str, dtype: str, mode: str, edit: str
) -> None:
    """With ``hoist_parameter_work`` on, the hoisted values (weight copies,
    padded weights, batch norm's scale and shift) are recomputed after every
    edit that gives a parameter a new version or a new tensor; with CUDA
    graphs, new hoisted values are new static inputs, so a new capture.
    Edits through ``.data`` bump no version counter and leave them stale: the
    opt-in mode's documented caveat (Note [Hoisted parameter work]), not
    asserted here."""
    _check_opt_in(GPU_MODELS[model], edit, DTYPES[dtype], mode)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("edit", _OPT_IN_EDITS)
def test_opt_in_hoisting_follows_version_counted_edits_under_autocast(mode: str, edit: str) -> None:
    """The same for autocast's hoisted bf16 casts of fp32 weights."""
    _check_opt_in(AUTOCAST_MODEL, edit, torch.float32, mode)
