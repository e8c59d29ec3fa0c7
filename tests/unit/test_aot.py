"""Stage 2: aot_autograd paths and the decomposition table."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mybackend.aot
from mybackend.decompositions import KEPT_WHOLE, decomposition_table
from tests.testing import compiled_records


def test_kept_whole_ops_are_not_in_the_table() -> None:
    names = {str(op) for op in decomposition_table()}
    assert not names & set(KEPT_WHOLE)
    assert "aten.gelu_backward.default" in names  # composite pointwise ops do decompose


def test_attention_stays_one_node_on_cpu() -> None:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    compiled = torch.compile(attention, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        out, records = compiled_records(lambda: compiled(q, k, v))
    torch.testing.assert_close(out, attention(q, k, v), rtol=1e-4, atol=1e-5)
    assert "attention" in records[0].ir_text, records[0].ir_text
    assert "aten::_softmax" not in records[0].ir_text


def test_training_graph_splits_into_forward_and_backward() -> None:
    w = torch.randn(8, 8, requires_grad=True)
    compiled = torch.compile(
        lambda x: torch.tanh(x @ w).sum(), backend="mybackend", options={"strict": True}
    )
    loss, records = compiled_records(lambda: compiled(torch.randn(4, 8)))
    _, backward = compiled_records(lambda: loss.backward())
    assert [r.kind for r in records] == ["forward"]
    assert [r.kind for r in backward] == ["backward"]
    assert w.grad is not None and w.grad.abs().sum() > 0


def test_compiling_never_reads_tensor_data() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mybackend.backend import mybackend_backend

    gm = torch.fx.symbolic_trace(lambda x: (torch.relu(x) + 1,))  # dynamo graphs return tuples
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.randn(3))
    compiled = mybackend_backend(gm, [fake], options={"strict": True})
    assert compiled(torch.tensor([-1.0, 0.5, 2.0]))[0].tolist() == [1.0, 1.5, 3.0]


def test_batch_norm_backward_stays_one_node() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = torch.randn(2, 3, 8, 8)
    out, _ = compiled_records(lambda: compiled(x))
    _, backward = compiled_records(lambda: out.square().sum().backward())
    ir = backward[0].ir_text
    assert ir.count("aten::native_batch_norm_backward.default") == 1, ir
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for got, want in zip(expected, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_embedding_gradient_stays_one_node() -> None:
    """Note [Embedding gradients stay whole]: a token type per position
    (every row into row 0) and a padding index, summed as eager does."""
    embedding = torch.nn.Embedding(5, 3, padding_idx=2)
    tokens = torch.tensor([[0, 0, 2, 4], [0, 2, 0, 1]])
    compiled = torch.compile(embedding, backend="mybackend", options={"strict": True})
    out, _ = compiled_records(lambda: compiled(tokens))
    _, backward = compiled_records(lambda: out.square().sum().backward())
    ir = backward[0].ir_text
    assert "aten::embedding_dense_backward.default" in ir, ir
    assert "aten::index_put" not in ir, ir
    got = embedding.weight.grad.clone()
    embedding.zero_grad()
    embedding(tokens).square().sum().backward()
    torch.testing.assert_close(got, embedding.weight.grad)
    assert got[2].abs().sum() == 0  # the padding row takes no gradient


class _Attention(torch.nn.Module):
    """A projection, then attention (the attention-mask pass rewrites a copy
    of the graph before aot_autograd) or a plain product (no pass)."""

    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 24)
        self.sdpa = sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.proj(x).view(1, 4, 3, 8).unbind(2)
        if self.sdpa:
            return F.scaled_dot_product_attention(q[None], k[None], v[None])
        return q * k + v


@pytest.mark.parametrize("sdpa", [False, True])
def test_parameters_stay_static_inputs_after_the_passes_before_aot(
    monkeypatch: pytest.MonkeyPatch, sdpa: bool
) -> None:
    """Note [Dynamo's metadata on a rewritten graph]: the projection's
    weight and bias reach the core as static inputs (CUDA graphs capture
    them in place) whether or not a pass rewrote the dynamo graph first."""
    seen: list[tuple[str, list[int]]] = []
    real = mybackend.aot.static_input_indices

    def recording(kind: str) -> list[int]:
        indices = real(kind)
        seen.append((kind, indices))
        return indices

    monkeypatch.setattr(mybackend.aot, "static_input_indices", recording)
    torch._dynamo.reset()
    model = _Attention(sdpa)
    with torch.no_grad():
        compiled = torch.compile(model, backend="mybackend", options={"strict": True})
        _, records = compiled_records(lambda: compiled(torch.randn(4, 8)))
    assert ("attention" in records[0].ir_text) == sdpa
    assert seen == [("inference", [0, 1])]
