"""A module compiled for training and then evaluated runs its eval graphs in
mybackend, not silently eagerly (issue 32: GPT-2's outputs in eval after
training were bit-identical to eager's on the GPU, as if nothing ran in the
core)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.testing import compiled_records

transformers = pytest.importorskip("transformers")


def _tiny_gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32, resid_pdrop=0.1
    )
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize("situation", ["no_grad", "inference_mode"])
def test_eval_graphs_after_training_run_in_the_core(situation: str) -> None:
    torch.manual_seed(0)
    model = _tiny_gpt2()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (2, 16))
    for _ in range(2):
        compiled(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    context: Any = torch.no_grad() if situation == "no_grad" else torch.inference_mode()
    with context:
        out, records = compiled_records(lambda: compiled(ids).logits)
        expected = model(ids).logits
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    inference = [r for r in records if r.kind == "inference"]
    assert inference, [(r.name, r.kind) for r in records]  # eval recompiled, as an inference graph
    for record in inference:
        assert record.fallback_reason is None, record.fallback_reason
        assert record.compiled is not None
        assert record.compiled.stats()["nodes_run_in_partitions"] > 0
