"""Attention with dropout trained under CUDA graphs (Note [RNG state follows
the capture] in src_cpp/runtime/rng_state.h, Note [No capture over host
tensors] in cuda_graph_runner.cpp).

Memory-efficient attention keeps its dropout RNG state on the host or on
the device depending on whether the forward ran under a capture, and its
backward reads it by whether it runs under one. A T5 trained with
mode="reduce-overhead" died with SIGSEGV in autograd's thread: a replayed
forward handed a device seed to a backward's first, uncaptured call. Flash
attention keeps its state on the device always: it must be left there.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

pytestmark = pytest.mark.gpu


class BiasedAttention(torch.nn.Module):
    """Self-attention with a learned additive bias (T5's relative position
    bias): a bias that needs a gradient sends sdpa to memory-efficient
    attention."""

    def __init__(self, heads: int = 4, dim: int = 64, seq: int = 64, bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.bias = torch.nn.Parameter(torch.randn(1, heads, seq, seq) * 0.1) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=self.bias, dropout_p=0.1 if self.training else 0.0
        )
        return self.out(y.transpose(1, 2).reshape(b, s, d))


def _train(model: torch.nn.Module, steps: int, backends: list[SDPBackend]) -> list[float]:
    compiled = torch.compile(model, backend="mybackend", mode="reduce-overhead")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4, 64, 64, device="cuda")
    losses = []
    with sdpa_kernel(backends):
        for _ in range(steps):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = compiled(x).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    ("backend", "bias"),
    [(SDPBackend.EFFICIENT_ATTENTION, True), (SDPBackend.FLASH_ATTENTION, False)],
    ids=["efficient-with-bias-gradient", "flash"],
)
def test_dropout_attention_trains_under_cuda_graphs(backend: SDPBackend, bias: bool) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = BiasedAttention(bias=bias).cuda().train()
    # Step 2 replays the forward captured at step 1 (device RNG state) into
    # the backward's first call of that signature, uncaptured: the crash.
    losses = _train(model, steps=5, backends=[backend])
    torch.cuda.synchronize()
    assert all(torch.isfinite(torch.tensor(losses))), losses
    for parameter in model.parameters():
        assert parameter.grad is None  # zeroed; the steps ran to the end
        assert torch.isfinite(parameter).all()


def test_dropout_attention_gradients_follow_eager_statistically() -> None:
    """Dropout masks differ between runs; the mean gradient of many steps
    at p=0.1 must still match eager's at the same weights."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = BiasedAttention().cuda().train()
    reference = BiasedAttention().cuda().train()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="mybackend", mode="reduce-overhead")
    x = torch.randn(4, 64, 64, device="cuda")
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        for _ in range(40):
            compiled(x).pow(2).mean().backward()
            reference(x).pow(2).mean().backward()
    assert model.bias is not None and reference.bias is not None
    a, b = model.bias.grad, reference.bias.grad
    assert a is not None and b is not None
    relative = ((a - b).norm() / b.norm()).item()
    assert relative < 0.2, relative
