"""mybackend/passes/gathered_tables.py: a table's rows gathered and moved into
heads-first order are one gather from the transposed table (Note [Gathered
tables in their final layout])."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mybackend.passes import pipeline
from mybackend.passes.gathered_tables import gather_tables_in_final_layout
from tests.testing import (
    assert_same_result,
    call_targets,
    traced_and_rewritten,
    training_steps_match_eager,
)

aten = torch.ops.aten
N, H, POSITIONS = 7, 3, 13  # window tokens, heads, table rows


def _rewritten(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> tuple:
    return traced_and_rewritten(gather_tables_in_final_layout, fn, *inputs)


def _relative_position_bias(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """torchvision's Swin (and BEiT's) bias: rows per token pair, heads first."""
    bias = table[index].view(N, N, -1)
    return bias.permute(2, 0, 1).contiguous().unsqueeze(0)


def _inputs(dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(POSITIONS, H), torch.randint(0, POSITIONS, (N * N,), dtype=dtype)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_the_copy_after_a_gathered_table_goes(index_dtype: torch.dtype) -> None:
    inputs = _inputs(index_dtype)
    before, after, count = _rewritten(_relative_position_bias, *inputs)
    assert count == 1
    targets = call_targets(after)
    assert aten.clone.default not in targets
    (gather,) = after.graph.find_nodes(op="call_function", target=aten.index.Tensor)
    assert gather.args[0].target is aten.permute.default  # the transposed table
    assert gather.meta["val"].shape == (H, N * N) and gather.meta["val"].is_contiguous()
    assert_same_result(before, after, inputs)


def _permuted_otherwise(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table[index].view(N, N, -1).permute(2, 1, 0).contiguous()


def _read_twice(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    rows = table[index]
    return rows.view(N, N, -1).permute(2, 0, 1).contiguous() + rows.sum()


def _channels_last_copy(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    bias = table[index].view(N, N, -1, 1).permute(3, 0, 1, 2)
    return bias.contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("fn", [_permuted_otherwise, _read_twice, _channels_last_copy])
def test_other_chains_keep_their_copy(fn: Callable[..., torch.Tensor]) -> None:
    inputs = _inputs()
    before, after, count = _rewritten(fn, *inputs)
    assert count == 0
    assert aten.clone.default in call_targets(after)
    assert_same_result(before, after, inputs)


class _WindowBias(torch.nn.Module):
    """Scores plus a learned relative position bias, softmaxed (one window)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(POSITIONS, H))
        self.register_buffer("index", torch.randint(0, POSITIONS, (N * N,)))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores + _relative_position_bias(self.table, self.index), -1)


def test_a_compiled_training_step_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forward graph is rewritten after aot_autograd's partition; the
    backward (a scatter into the table's gradient) is unchanged."""
    rewrites: list[int] = []

    def counted(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
        rewrites.append(gather_tables_in_final_layout(gm, recompile=recompile))
        return rewrites[-1]

    monkeypatch.setattr(pipeline, "gather_tables_in_final_layout", counted)
    torch.manual_seed(0)
    compiled = training_steps_match_eager(_WindowBias(), (2, H, N, N))
    assert compiled.table.grad is not None
    assert sum(rewrites) == 1, rewrites  # the forward's chain, once
