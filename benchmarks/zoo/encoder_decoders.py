"""Encoder-decoders: transformers sequence-to-sequence models built from configs.

Each takes the encoder input and ``decoder_input_ids`` (teacher forcing, no
KV cache) and returns the decoder's logits; training is cross entropy against
random tokens. Tiny variants: 2 + 2 layers of width 64 and a 1000-word
vocabulary (Whisper: 16 mel bins, 128 frames).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from benchmarks.spec import ModelSpec
from benchmarks.zoo._common import audio_seq2seq, entry, hf_config, hf_model, seq2seq

FAMILY = "encoder_decoder"
TINY_VOCAB = 1000
_SEQ2SEQ = ("input_ids", "decoder_input_ids")
# BART/Whisper-style tiny configuration (names as BartConfig spells them).
_TINY: dict[str, Any] = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    vocab_size=TINY_VOCAB,
)


def t5_base(tiny: bool) -> nn.Module:
    """T5ForConditionalGeneration, t5-base: RMS-style layer norm without mean,
    bucketed relative position bias, no biases."""
    sizes: dict[str, Any] = (
        dict(d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2, vocab_size=TINY_VOCAB)
        if tiny
        else dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    )
    config = hf_config("T5Config", decoder_start_token_id=0, **sizes)
    return hf_model("T5ForConditionalGeneration", config, names=_SEQ2SEQ)


def bart_base(tiny: bool) -> nn.Module:
    """BartForConditionalGeneration, bart-base: post-norm blocks, learned positions, GELU."""
    base: dict[str, Any] = dict(
        d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
    )  # fmt: skip
    sizes = dict(_TINY, max_position_embeddings=64) if tiny else base
    return hf_model(
        "BartForConditionalGeneration", hf_config("BartConfig", **sizes), names=_SEQ2SEQ
    )


def whisper_base(tiny: bool) -> nn.Module:
    """WhisperForConditionalGeneration, whisper-base: a conv stem over 80 mel
    bins of 3000 frames (30 s), a 6-layer audio encoder, a 6-layer text decoder."""
    if tiny:
        special = TINY_VOCAB - 1  # whisper's special ids sit at the end of its vocabulary
        sizes: dict[str, Any] = dict(
            _TINY, num_mel_bins=16, max_source_positions=64, max_target_positions=64,
            pad_token_id=special, bos_token_id=special, eos_token_id=special,
            decoder_start_token_id=special,
        )  # fmt: skip
    else:
        sizes = dict(
            d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
            decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        )  # fmt: skip
    config = hf_config("WhisperConfig", **sizes)
    return hf_model(
        "WhisperForConditionalGeneration", config, names=("input_features", "decoder_input_ids")
    )


SPECS: tuple[ModelSpec, ...] = (
    entry("t5_base", FAMILY, ["t5"], t5_base,
          seq2seq(src=(256, 32), tgt=(128, 16), vocab=(32128, TINY_VOCAB)),
          train_batch=32, throughput_batch=32),
    entry("bart_base", FAMILY, ["bart"], bart_base,
          seq2seq(src=(256, 32), tgt=(128, 16), vocab=(50265, TINY_VOCAB)),
          train_batch=32, throughput_batch=32),
    entry("whisper_base", FAMILY, ["whisper", "audio"], whisper_base,
          audio_seq2seq(mels=(80, 16), frames=(3000, 128), tgt=(64, 16),
                        vocab=(51865, TINY_VOCAB)),
          train_batch=32, throughput_batch=32),
)  # fmt: skip
