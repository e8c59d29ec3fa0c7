"""What the zoo's family files share: the entry maker, input makers, the
transformers wrapper and config helper, and dropout removal."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from benchmarks.spec import InputMaker, ModelSpec

# Batch of the tiny variants, inference and training alike: CPU smoke runs.
TINY_BATCH = 4

_DROPOUTS = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def no_dropout(module: nn.Module) -> nn.Module:
    """Sets every dropout and stochastic-depth probability in ``module`` to 0.

    The training accuracy check compares one step of a backend with eager's
    from the same weights: random masks would differ between the two. Dropout
    that transformers applies functionally reads its config, which
    ``hf_config`` zeroes.
    """
    for m in module.modules():
        # torchvision's stochastic depth is a StochasticDepth module with ``p``.
        if isinstance(m, _DROPOUTS) or type(m).__name__ == "StochasticDepth":
            setattr(m, "p", 0.0)  # noqa: B010 (typed as Tensor | Module by mypy)
        elif isinstance(getattr(m, "drop_prob", None), float):  # timm DropPath
            setattr(m, "drop_prob", 0.0)  # noqa: B010
    return module


def entry(
    name: str,
    family: str,
    tags: Iterable[str],
    build: Callable[[bool], nn.Module],
    make_inputs: InputMaker,
    *,
    train_batch: int,
    throughput_batch: int,
    loss: str = "ce",
) -> ModelSpec:
    """A zoo ModelSpec: dropout off, AdamW, tiny batches of ``TINY_BATCH``."""

    def build_without_dropout(tiny: bool) -> nn.Module:
        return no_dropout(build(tiny))

    build_without_dropout.__doc__ = build.__doc__
    return ModelSpec(
        name,
        build_without_dropout,
        make_inputs,
        train_batch,
        loss,
        tiny_train_batch=TINY_BATCH,
        family=family,
        tags=frozenset(tags),
        throughput_batch=throughput_batch,
        tiny_throughput_batch=TINY_BATCH,
        optimizer="adamw",
    )


# --- transformers -------------------------------------------------------------


def hf_config(class_name: str, **kwargs: Any) -> Any:
    """``transformers.<class_name>(**kwargs)`` with every dropout, attention
    dropout and layer drop set to 0, and no KV cache."""
    import transformers

    config = getattr(transformers, class_name)(use_cache=False, **kwargs)
    for key, value in config.to_dict().items():
        if "drop" in key and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


class HFOutput(nn.Module):
    """Calls a transformers model with its inputs by keyword (``names``, in
    order) and returns one field of its output (``logits``,
    ``last_hidden_state``)."""

    def __init__(self, model: nn.Module, field: str, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.field = field
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        kwargs = {name: tensor for name, tensor in zip(self.names, inputs, strict=True)}
        return getattr(self.model(**kwargs), self.field)  # type: ignore[no-any-return]


def hf_model(
    class_name: str,
    config: Any,
    field: str = "logits",
    names: tuple[str, ...] = ("input_ids",),
) -> nn.Module:
    """``transformers.<class_name>(config)`` (random weights) wrapped in ``HFOutput``."""
    import transformers

    return HFOutput(getattr(transformers, class_name)(config), field, names)


# --- inputs -------------------------------------------------------------------


def seq2seq(src: tuple[int, int], tgt: tuple[int, int], vocab: tuple[int, int]) -> InputMaker:
    """``(input_ids, decoder_input_ids)``; each pair is (full, tiny)."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        i = int(tiny)
        return (
            torch.randint(0, vocab[i], (batch, src[i]), generator=gen),
            torch.randint(0, vocab[i], (batch, tgt[i]), generator=gen),
        )

    return make


def audio_seq2seq(
    mels: tuple[int, int], frames: tuple[int, int], tgt: tuple[int, int], vocab: tuple[int, int]
) -> InputMaker:
    """``(input_features (batch, mels, frames), decoder_input_ids)``; pairs are (full, tiny)."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        i = int(tiny)
        return (
            torch.randn(batch, mels[i], frames[i], generator=gen),
            torch.randint(0, vocab[i], (batch, tgt[i]), generator=gen),
        )

    return make


def sequences(steps: tuple[int, int], width: tuple[int, int]) -> InputMaker:
    """``(batch, steps, width)`` random feature sequences; pairs are (full, tiny)."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        i = int(tiny)
        return (torch.randn(batch, steps[i], width[i], generator=gen),)

    return make
