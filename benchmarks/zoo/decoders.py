"""Causal decoders: transformers language models built from configs, and a
hand-built top-2 mixture-of-experts transformer.

Every model returns next-token logits over 256 tokens (tiny: 32) without a
KV cache; the training loss is cross entropy against random tokens. Full
variants are 125M-400M-parameter configurations (one H100 trains each at its
batch under bf16 autocast with AdamW); tiny ones have 2 layers of width 64
and a 1000-word vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.spec import ModelSpec, tokens
from benchmarks.zoo._common import entry, hf_config, hf_model

FAMILY = "decoder"
SEQ, TINY_SEQ, TINY_VOCAB = 256, 32, 1000
# Llama-style tiny configuration (names as LlamaConfig spells them).
_TINY: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=TINY_VOCAB,
    max_position_embeddings=128,
)


def gpt2_medium(tiny: bool) -> nn.Module:
    """GPT2LMHeadModel, gpt2-medium (24 layers, width 1024): learned positions, fused qkv."""
    sizes: dict[str, Any] = (
        dict(n_embd=64, n_layer=2, n_head=2, vocab_size=TINY_VOCAB, n_positions=128)
        if tiny
        else dict(n_embd=1024, n_layer=24, n_head=16)
    )
    config = hf_config("GPT2Config", bos_token_id=0, eos_token_id=0, **sizes)
    return hf_model("GPT2LMHeadModel", config)


def pythia_160m(tiny: bool) -> nn.Module:
    """GPTNeoXForCausalLM, pythia-160m: parallel attention and MLP residuals,
    rotary positions on a quarter of each head."""
    sizes = _TINY if tiny else dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
        vocab_size=50304,
    )  # fmt: skip
    config = hf_config("GPTNeoXConfig", rotary_pct=0.25, use_parallel_residual=True, **sizes)
    return hf_model("GPTNeoXForCausalLM", config)


def opt_125m(tiny: bool) -> nn.Module:
    """OPTForCausalLM, opt-125m: learned positions offset by 2, ReLU MLP."""
    small: dict[str, Any] = dict(
        hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=2,
        word_embed_proj_dim=64, vocab_size=TINY_VOCAB, max_position_embeddings=128,
    )  # fmt: skip
    return hf_model("OPTForCausalLM", hf_config("OPTConfig", **(small if tiny else {})))


def llama_gqa(tiny: bool) -> nn.Module:
    """LlamaForCausalLM, ~250M: RMSNorm, rotary positions, SwiGLU, grouped-query
    attention (16 query heads share 4 key/value heads; tiny: 4 share 2)."""
    sizes = dict(_TINY, num_key_value_heads=2) if tiny else dict(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
    )  # fmt: skip
    return hf_model("LlamaForCausalLM", hf_config("LlamaConfig", **sizes))


def mistral_gqa(tiny: bool) -> nn.Module:
    """MistralForCausalLM, ~200M: Llama's block with 8 key/value heads for 16
    and a 128-token sliding attention window (tiny: 16 tokens)."""
    sizes = dict(_TINY, num_key_value_heads=2, sliding_window=16) if tiny else dict(
        hidden_size=1024, intermediate_size=3584, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=8, vocab_size=32000, sliding_window=128,
    )  # fmt: skip
    return hf_model("MistralForCausalLM", hf_config("MistralConfig", **sizes))


def mixtral_moe(tiny: bool) -> nn.Module:
    """MixtralForCausalLM, ~300M: 8 SwiGLU experts a layer, each token routed to 2
    (transformers' grouped-matmul experts), grouped-query attention. Tiny: 4
    experts run by transformers' per-expert loop, since grouped_mm has no fp64
    kernel for the CPU runs' fp64 reference."""
    if tiny:
        sizes: dict[str, Any] = dict(
            _TINY, num_key_value_heads=2, num_local_experts=4, experts_implementation="eager"
        )
    else:
        sizes = dict(
            hidden_size=768, intermediate_size=1536, num_hidden_layers=6,
            num_attention_heads=12, num_key_value_heads=4, num_local_experts=8,
            vocab_size=32000,
        )  # fmt: skip
    config = hf_config("MixtralConfig", num_experts_per_tok=2, **sizes)
    return hf_model("MixtralForCausalLM", config)


def bloom_560m(tiny: bool) -> nn.Module:
    """BloomForCausalLM, bloom-560m's layers with a 50257-word vocabulary (354M
    parameters): ALiBi position biases, LayerNorm on the embeddings."""
    sizes: dict[str, Any] = (
        dict(hidden_size=64, n_layer=2, n_head=2, vocab_size=TINY_VOCAB)
        if tiny
        else dict(hidden_size=1024, n_layer=24, n_head=16, vocab_size=50257)
    )
    return hf_model("BloomForCausalLM", hf_config("BloomConfig", **sizes))


class Top2MoE(nn.Module):
    """A top-2 mixture of SwiGLU experts with capacity-limited, static-shape dispatch.

    The router picks 2 experts per token; each expert takes at most
    ``capacity`` tokens (``capacity_factor`` times its fair share), the rest
    of its tokens are dropped (their slot is a scratch row). Tokens are
    scattered into an ``(experts, capacity, width)`` buffer, the experts run
    as batched matmuls, and the results are gathered back, weighted by the
    renormalised router probabilities: index arithmetic with no shape that
    depends on the data.
    """

    def __init__(self, width: int, hidden: int, experts: int, capacity_factor: float = 1.25):
        super().__init__()
        self.experts, self.capacity_factor = experts, capacity_factor
        self.router = nn.Linear(width, experts, bias=False)
        self.w_gate_up = nn.Parameter(torch.randn(experts, width, 2 * hidden) * width**-0.5)
        self.w_down = nn.Parameter(torch.randn(experts, hidden, width) * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        n, e = x.shape[0], self.experts
        capacity = max(1, int(self.capacity_factor * 2 * n / e))
        probs = self.router(x).float().softmax(-1)
        weight, expert = probs.topk(2, dim=-1)  # (n, 2)
        weight = weight / weight.sum(-1, keepdim=True)
        # Position of each (token, choice) in its expert's queue, first choices first.
        onehot = F.one_hot(expert.t().reshape(-1), e)  # (2n, e)
        position = ((onehot.cumsum(0) - 1) * onehot).sum(-1)  # (2n,)
        keep = position < capacity
        slot = torch.where(keep, expert.t().reshape(-1) * capacity + position, e * capacity)
        tokens_in = x.repeat(2, 1)  # (2n, width), choice-major as ``slot``
        buffer = x.new_zeros(e * capacity + 1, shape[-1]).index_copy(0, slot, tokens_in)
        routed = buffer[:-1].view(e, capacity, -1)
        gate, up = torch.bmm(routed, self.w_gate_up).chunk(2, dim=-1)
        out = torch.bmm(F.silu(gate) * up, self.w_down).reshape(e * capacity, -1)
        out = torch.cat([out, out.new_zeros(1, out.shape[-1])])[slot]  # (2n, width)
        scale = (weight.t().reshape(-1) * keep).to(out.dtype).unsqueeze(-1)
        return (out * scale).view(2, n, -1).sum(0).view(shape)  # type: ignore[no-any-return]


class _MoEBlock(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int, experts: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(width), nn.RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.moe = Top2MoE(width, hidden, experts)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, w))
        return x + self.moe(self.norm2(x))  # type: ignore[no-any-return]


class MoETransformer(nn.Module):
    """A causal transformer whose MLPs are ``Top2MoE`` layers; returns logits."""

    def __init__(
        self, vocab: int, width: int, layers: int, heads: int, hidden: int, experts: int, seq: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.ModuleList(_MoEBlock(width, heads, hidden, experts) for _ in range(layers))
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # type: ignore[no-any-return]


def moe_top2(tiny: bool) -> nn.Module:
    """Hand-built top-2 MoE transformer: 8 layers of width 768, 8 experts (tiny: 2, 64, 4)."""
    if tiny:
        return MoETransformer(TINY_VOCAB, 64, 2, 2, 128, 4, TINY_SEQ)
    return MoETransformer(32000, 768, 8, 12, 1536, 8, SEQ)


SPECS: tuple[ModelSpec, ...] = (
    entry("gpt2_medium", FAMILY, ["gpt2"], gpt2_medium,
          tokens(SEQ, TINY_SEQ, 50257, TINY_VOCAB), train_batch=8, throughput_batch=32),
    entry("pythia_160m", FAMILY, ["gpt_neox", "rope"], pythia_160m,
          tokens(SEQ, TINY_SEQ, 50304, TINY_VOCAB), train_batch=16, throughput_batch=32),
    entry("opt_125m", FAMILY, ["opt"], opt_125m,
          tokens(SEQ, TINY_SEQ, 50272, TINY_VOCAB), train_batch=16, throughput_batch=32),
    entry("llama_gqa", FAMILY, ["llama", "gqa", "rope"], llama_gqa,
          tokens(SEQ, TINY_SEQ, 32000, TINY_VOCAB), train_batch=16, throughput_batch=32),
    entry("mistral_gqa", FAMILY, ["mistral", "gqa", "rope", "sliding_window"], mistral_gqa,
          tokens(SEQ, TINY_SEQ, 32000, TINY_VOCAB), train_batch=16, throughput_batch=32),
    entry("mixtral_moe", FAMILY, ["mixtral", "moe", "gqa", "rope"], mixtral_moe,
          tokens(SEQ, TINY_SEQ, 32000, TINY_VOCAB), train_batch=16, throughput_batch=32),
    entry("bloom_560m", FAMILY, ["bloom", "alibi"], bloom_560m,
          tokens(SEQ, TINY_SEQ, 50257, TINY_VOCAB), train_batch=8, throughput_batch=32),
    entry("moe_top2", FAMILY, ["moe", "hand_built"], moe_top2,
          tokens(SEQ, TINY_SEQ, 32000, TINY_VOCAB), train_batch=16, throughput_batch=32),
)  # fmt: skip
