"""GPU-marked: embedding gradients (Note [Embedding gradients stay whole]).

A lookup's gradient runs as ATen's embedding backward, which sums the rows
of a repeated token in parallel: BERT's token types send every row of a
batch to row 0. No indexing_backward_kernel (index_put's serial sum) runs.
"""

from __future__ import annotations

import pytest
import torch

from tests.testing import compiled_records

pytestmark = pytest.mark.gpu


def _gradient(module: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    module.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = module(tokens).float().square().mean()
    loss.backward()
    return module.weight.grad.clone()


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_repeated_tokens_sum_like_eager_without_index_put(padding_idx: int | None) -> None:
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(30, 768, padding_idx=padding_idx).cuda()
    tokens = torch.zeros(32, 128, dtype=torch.long, device="cuda")  # token types
    tokens[:, 100:] = torch.randint(0, 30, (32, 28), device="cuda")
    expected = _gradient(embedding, tokens)
    torch._dynamo.reset()
    compiled = torch.compile(embedding, backend="mybackend", options={"strict": True})
    _, records = compiled_records(lambda: _gradient(compiled, tokens))
    [backward] = [r for r in records if r.kind == "backward"]
    assert "aten::embedding_dense_backward" in backward.ir_text, backward.ir_text
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = _gradient(compiled, tokens)
        torch.cuda.synchronize()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not any("indexing_backward" in e.name for e in prof.events())
