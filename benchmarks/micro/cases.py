"""The kernel micro-benchmarks: each one computation with its byte and flop counts.

Counts are the floor's (METHOD.md): each input read once, each output written
once, and the arithmetic a perfect kernel must do. Adding a case is one
``MicroCase`` entry in ``CASES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

BF16 = 2  # bytes per element

# (device, generator) -> the inputs of the case, random (never zeros).
Maker = Callable[[torch.device, torch.Generator], tuple[torch.Tensor, ...]]


@dataclasses.dataclass(frozen=True)
class MicroCase:
    """One micro-benchmark: a function of tensors and what it must cost at least."""

    name: str
    fn: Callable[..., torch.Tensor]
    make_inputs: Maker
    bytes_moved: float
    flops: float
    note: str

    def reference(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The result in fp32 eager: floating inputs upcast, indices as they are."""
        return self.fn(*(t.float() if t.is_floating_point() else t for t in inputs))


def _randn(*shape: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(*shape, generator=gen).to(device, torch.bfloat16),)

    return make


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    """Eight elementwise ops in a row: one pass over memory once fused."""
    y = x * 1.1
    y = y + 0.3
    y = torch.relu(y)
    y = y * y
    y = y - 0.2
    y = torch.sigmoid(y)
    y = y * 0.9
    return torch.tanh(y)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def bias_grad_sum(g: torch.Tensor) -> torch.Tensor:
    """A linear layer's bias gradient under autocast: bf16 rows summed into fp32
    columns (Note [Split outer reductions])."""
    return g.sum(0, dtype=torch.float32)


def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b))


def output_layer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A language model's tied output layer: rows of 50257 are not 16-byte multiples."""
    return F.linear(x, w)


def cross_entropy_fwd_bwd(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A language model's loss over bf16 logits in fp32 (as autocast runs it),
    forward and backward (Note [Fused cross-entropy]); the graph holds both,
    as in attention_fwd_bwd."""
    x = x.detach().requires_grad_()
    loss = F.cross_entropy(x.float(), target)
    (grad,) = torch.autograd.grad(loss, x)
    return grad


def _cross_entropy_inputs(rows: int, vocab: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(rows, vocab, generator=gen).to(device, torch.bfloat16)
        return x, torch.randint(0, vocab, (rows,), generator=gen).to(device)

    return make


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def attention_fwd_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> Any:
    """Forward and backward of attention; dynamo breaks the graph at autograd.grad,
    so the backend compiles the forward with its backward (aot's joint graph)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    return out + dq + dk + dv


def _attention_inputs(b: int, h: int, s: int, d: int, count: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return tuple(
            torch.randn(b, h, s, d, generator=gen).to(device, torch.bfloat16) for _ in range(count)
        )

    return make


def _with_affine(rows: int, cols: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(rows, cols, generator=gen)
        w, b = torch.randn(cols, generator=gen), torch.randn(cols, generator=gen)
        return tuple(t.to(device, torch.bfloat16) for t in (x, w, b))

    return make


def _with_weight(rows: int, cols: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x, w = torch.randn(rows, cols, generator=gen), torch.randn(cols, generator=gen)
        return tuple(t.to(device, torch.bfloat16) for t in (x, w))

    return make


def _linear_inputs(m: int, k: int, n: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(m, k, generator=gen)
        w = torch.randn(n, k, generator=gen) / k**0.5
        b = torch.randn(n, generator=gen)
        return tuple(t.to(device, torch.bfloat16) for t in (x, w, b))

    return make


def _output_layer_inputs(m: int, k: int, vocab: int) -> Maker:
    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(m, k, generator=gen)
        w = torch.randn(vocab, k, generator=gen) / k**0.5
        return tuple(t.to(device, torch.bfloat16) for t in (x, w))

    return make


def conv_bottleneck(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    w3: torch.Tensor,
    b3: torch.Tensor,
) -> torch.Tensor:
    """A ResNet-50 bottleneck's three convolutions, each + bias + ReLU (BN folded)."""
    y = torch.relu(F.conv2d(x, w1, b1))
    y = torch.relu(F.conv2d(y, w2, b2, padding=1))
    return torch.relu(F.conv2d(y, w3, b3))


def _bottleneck_inputs(batch: int, channels: int, width: int, hw: int) -> Maker:
    """Channels-last bf16 input [batch, channels, hw, hw] and the 1x1, 3x3, 1x1 weights."""

    def make(device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        shapes = [(width, channels, 1, 1), (width, width, 3, 3), (channels, width, 1, 1)]
        out: list[torch.Tensor] = [torch.randn(batch, channels, hw, hw, generator=gen)]
        for shape in shapes:
            fan_in = shape[1] * shape[2] * shape[3]
            out += [
                torch.randn(*shape, generator=gen) / fan_in**0.5,
                torch.randn(shape[0], generator=gen),
            ]
        return tuple(
            t.to(device, torch.bfloat16).contiguous(
                memory_format=torch.channels_last if t.dim() == 4 else torch.contiguous_format
            )
            for t in out
        )

    return make


def _bottleneck_case(stage: str, batch: int, channels: int, width: int, hw: int) -> MicroCase:
    pixels = batch * hw * hw
    weights = 2 * channels * width + 9 * width * width
    return MicroCase(
        f"conv_bottleneck_{stage}",
        conv_bottleneck,
        _bottleneck_inputs(batch, channels, width, hw),
        (2 * pixels * channels + weights + 2 * width + channels) * BF16,
        2 * pixels * weights + 2 * pixels * (2 * width + channels),  # MACs, bias + ReLU
        f"ResNet-50 {stage} bottleneck convs + bias + ReLU, batch {batch}, "
        f"{channels}->{width}->{width}->{channels} at {hw}x{hw}, channels-last bf16",
    )


POINTWISE_N = 128 * 2**20  # 256 MiB of bf16
ROWS, COLS = 32768, 4096  # 256 MiB of bf16 for the row-wise kernels
TOKENS, HIDDEN = 197, 768  # ViT-B/16 at batch 1: a launch-and-latency-bound norm
M, K, N = 8192, 768, 3072
VOCAB = 50257  # GPT-2's output layer (Note [Aligned matrix products])
BGRAD_ROWS, BGRAD_COLS = 12608, 768  # ViT-B/16 training: 64 x 197 tokens
CE_ROWS = 4096  # GPT-2's training batch: 16 x 256 tokens
# BERT-base attention: batch 32, 12 heads, 128 tokens, head dim 64.
ATT_B, ATT_H, ATT_S, ATT_D = 32, 12, 128, 64
ATT_ELEMS = ATT_B * ATT_H * ATT_S * ATT_D
ATT_FLOPS = 4 * ATT_B * ATT_H * ATT_S * ATT_S * ATT_D  # q·kᵀ and p·v

CASES: dict[str, MicroCase] = {
    c.name: c
    for c in (
        MicroCase(
            "pointwise_chain",
            pointwise_chain,
            _randn(POINTWISE_N),
            2 * POINTWISE_N * BF16,
            8 * POINTWISE_N,
            "8 elementwise ops over 256 MiB bf16",
        ),
        MicroCase(
            "layer_norm",
            layer_norm,
            _with_affine(ROWS, COLS),
            (2 * ROWS * COLS + 2 * COLS) * BF16,
            8 * ROWS * COLS,
            f"layer norm over the last dim of {ROWS}x{COLS} bf16",
        ),
        MicroCase(
            "layer_norm_tokens",
            layer_norm,
            _with_affine(TOKENS, HIDDEN),
            (2 * TOKENS * HIDDEN + 2 * HIDDEN) * BF16,
            8 * TOKENS * HIDDEN,
            f"layer norm over {TOKENS}x{HIDDEN} bf16 (ViT-B/16's tokens at batch 1)",
        ),
        MicroCase(
            "rms_norm",
            rms_norm,
            _with_weight(ROWS, COLS),
            (2 * ROWS * COLS + COLS) * BF16,
            4 * ROWS * COLS,
            f"RMS norm (F.rms_norm) over the last dim of {ROWS}x{COLS} bf16",
        ),
        MicroCase(
            "softmax",
            softmax,
            _randn(ROWS, COLS),
            2 * ROWS * COLS * BF16,
            5 * ROWS * COLS,
            f"softmax over the last dim of {ROWS}x{COLS} bf16",
        ),
        MicroCase(
            "bias_grad_sum",
            bias_grad_sum,
            _randn(BGRAD_ROWS, BGRAD_COLS),
            (BGRAD_ROWS * BGRAD_COLS + 2 * BGRAD_COLS) * BF16,
            BGRAD_ROWS * BGRAD_COLS,
            f"column sum of {BGRAD_ROWS}x{BGRAD_COLS} bf16 into fp32 "
            "(ViT-B/16's bias gradient at batch 64)",
        ),
        MicroCase(
            "linear_gelu",
            linear_gelu,
            _linear_inputs(M, K, N),
            (M * K + N * K + N + M * N) * BF16,
            2 * M * K * N + 10 * M * N,
            f"Linear+bias+GELU {M}x{K} -> {N} bf16",
        ),
        MicroCase(
            "output_layer",
            output_layer,
            _output_layer_inputs(M, K, VOCAB),
            (M * K + VOCAB * K + M * VOCAB) * BF16,
            2 * M * K * VOCAB,
            f"Linear {M}x{K} -> {VOCAB} bf16, no bias (GPT-2's logits at batch 32)",
        ),
        MicroCase(
            "cross_entropy",
            cross_entropy_fwd_bwd,
            _cross_entropy_inputs(CE_ROWS, VOCAB),
            # logits read forward and backward, their gradient written
            3 * CE_ROWS * VOCAB * BF16,
            6 * CE_ROWS * VOCAB,
            f"cross-entropy forward+backward over {CE_ROWS}x{VOCAB} bf16 logits, fp32 math "
            "(GPT-2's loss at batch 16)",
        ),
        MicroCase(
            "attention",
            attention,
            _attention_inputs(ATT_B, ATT_H, ATT_S, ATT_D, 3),
            4 * ATT_ELEMS * BF16,
            ATT_FLOPS,
            f"SDPA forward, BERT-base shape B={ATT_B} H={ATT_H} S={ATT_S} D={ATT_D} bf16",
        ),
        MicroCase(
            "attention_fwd_bwd",
            attention_fwd_bwd,
            _attention_inputs(ATT_B, ATT_H, ATT_S, ATT_D, 4),
            # reads q, k, v, g (and o, dO again), writes o, dq, dk, dv
            10 * ATT_ELEMS * BF16,
            ATT_FLOPS * 7 // 2,  # forward, and a backward of five products
            f"SDPA forward+backward, B={ATT_B} H={ATT_H} S={ATT_S} D={ATT_D} bf16",
        ),
        _bottleneck_case("conv2_x", 32, 256, 64, 56),
        _bottleneck_case("conv4_x", 32, 1024, 256, 14),
    )
}
