"""Shared pytest setup: markers, seeds, a clean dynamo state per test."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

import mybackend
from mybackend._logging import reset_warnings

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    torch.manual_seed(0)
    random.seed(0)
    torch._dynamo.reset()
    reset_warnings()
    yield
    torch._dynamo.reset()


@pytest.fixture
def device() -> str:
    return "cuda" if HAS_GPU else "cpu"


__all__ = ["HAS_GPU", "mybackend"]
