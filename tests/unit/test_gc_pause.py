"""Note [No cyclic collections while compiling]: the pause and where it applies."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import mybackend.aot as aot
from mybackend.gc_pause import collections_paused


@pytest.fixture(autouse=True)
def collection_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_pause_nests_and_restores_collection() -> None:
    with collections_paused():
        assert not gc.isenabled()
        with collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer compile is still running
    assert gc.isenabled()


def test_a_program_that_disabled_collection_keeps_it_disabled() -> None:
    gc.disable()
    with collections_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_restores_collection() -> None:
    with pytest.raises(RuntimeError), collections_paused():
        raise RuntimeError("compile failed")
    assert gc.isenabled()


def test_forward_and_backward_compiles_run_without_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, bool] = {}
    partition, compile_now = aot._partition, aot._compile_now

    def record_partition(*args: Any, **kwargs: Any) -> Any:
        seen["partition"] = gc.isenabled()
        return partition(*args, **kwargs)

    def record_compile(
        gm: torch.fx.GraphModule, inputs: Any, name: str, kind: str, *rest: Any
    ) -> Any:
        seen[kind] = gc.isenabled()
        return compile_now(gm, inputs, name, kind, *rest)

    monkeypatch.setattr(aot, "_partition", record_partition)
    monkeypatch.setattr(aot, "_compile_now", record_compile)
    torch._dynamo.reset()
    weight = torch.randn(8, 8, requires_grad=True)
    fn = torch.compile(lambda x: (x @ weight).relu().sum(), backend="mybackend")
    fn(torch.randn(4, 8)).backward()
    # The backward compiles on autograd's first backward call, after the backend returned.
    assert seen == {"partition": False, "forward": False, "backward": False}
    assert gc.isenabled()
