"""The model zoo: 40+ models with random weights, one file per family, in the
same registry as the reference models (benchmarks/models.py ``ALL_MODELS``).

Every entry is a ``ModelSpec`` (benchmarks/spec.py) with its family, tags,
full and tiny builders, input maker, loss, throughput batch and training
batch; zoo models train with AdamW and their tiny variants run at batch 4.
Select them with ``python -m benchmarks --zoo`` or ``--family cnn,decoder``
(or ``--models zoo``); ``bash benchmarks/gpu_run.sh zoo [FAMILY...]`` queues
them one model per GPU. See benchmarks/README.md, "Model zoo".
"""

from __future__ import annotations

from benchmarks.spec import ModelSpec
from benchmarks.zoo import cnn, decoders, encoder_decoders, encoders, other, vision_transformers

_FILES = (cnn, vision_transformers, encoders, decoders, encoder_decoders, other)
FAMILIES: tuple[str, ...] = tuple(module.FAMILY for module in _FILES)
ZOO: dict[str, ModelSpec] = {spec.name: spec for module in _FILES for spec in module.SPECS}

if len(ZOO) != sum(len(module.SPECS) for module in _FILES):
    raise ValueError("two zoo models share a name")

__all__ = ["FAMILIES", "ZOO"]
