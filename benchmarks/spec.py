"""What a benchmarked model is: ``ModelSpec``, and the input makers the reference
models (models.py) and the model zoo (zoo/) share.

This module imports neither registry, so both can import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

# (batch, tiny, generator) -> the positional inputs of the module, on the CPU in
# fp32 (floating) or int64 (ids). The harness moves them to the run's device and
# casts the floating ones to its dtype (scenarios.Task), so one maker serves
# every device and precision.
InputMaker = Callable[[int, bool, torch.Generator], tuple[torch.Tensor, ...]]

# How the training step reduces the output to a scalar (scenarios.loss_value):
# "ce" cross entropy over the last dim against random class ids, "mse" mean
# squared error against a random target, "square" out.float().pow(2).mean()
# (no target: for models without a head).
LOSSES = ("ce", "mse", "square")
OPTIMIZERS = ("adam", "adamw")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One benchmarked model.

    ``build(tiny)`` returns a module whose forward takes ``make_inputs(...)``
    and returns one tensor. Inference runs at batch 1 and ``throughput_batch``
    (``tiny_throughput_batch`` for the tiny variant), training at
    ``train_batch`` (``tiny_train_batch``) with ``optimizer``. ``family`` is
    ``"reference"`` for the five models of the published figures, else the
    zoo family (zoo/__init__.py ``FAMILIES``); ``tags`` name what the model is
    (``"resnet"``, ``"gqa"``, ``"graph_break"``...).
    """

    name: str
    build: Callable[[bool], nn.Module]
    make_inputs: InputMaker
    train_batch: int
    loss: str = "ce"
    tiny_train_batch: int = 8
    family: str = "reference"
    tags: frozenset[str] = frozenset()
    throughput_batch: int = 32
    tiny_throughput_batch: int = 32
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"{self.name}: loss {self.loss!r} is not one of {LOSSES}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"{self.name}: optimizer {self.optimizer!r} not in {OPTIMIZERS}")

    def inference_batches(self, tiny: bool) -> tuple[int, int]:
        """Batch 1 (latency) and the throughput batch."""
        return (1, self.tiny_throughput_batch if tiny else self.throughput_batch)

    def training_batch(self, tiny: bool) -> int:
        return self.tiny_train_batch if tiny else self.train_batch


def images(full: int, tiny: int, channels: int = 3) -> InputMaker:
    """``(batch, channels, size, size)`` random images."""

    def make(batch: int, is_tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        size = tiny if is_tiny else full
        return (torch.randn(batch, channels, size, size, generator=gen),)

    return make


def tokens(full_seq: int, tiny_seq: int, full_vocab: int, tiny_vocab: int) -> InputMaker:
    """``(batch, seq)`` random token ids."""

    def make(batch: int, is_tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        seq, vocab = (tiny_seq, tiny_vocab) if is_tiny else (full_seq, full_vocab)
        return (torch.randint(0, vocab, (batch, seq), generator=gen),)

    return make


def features(full: int, tiny: int) -> InputMaker:
    """``(batch, width)`` random features."""

    def make(batch: int, is_tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, tiny if is_tiny else full, generator=gen),)

    return make
