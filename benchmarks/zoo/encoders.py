"""Transformer encoders: transformers models built from configs (random weights).

Full variants are the published base/large configurations at 128 tokens,
each with a different head (masked-LM logits, sequence or token
classification, bare hidden states); tiny variants: 2 layers of width 64,
2 heads, a 1000-word vocabulary, 32 tokens.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from benchmarks.spec import ModelSpec, tokens
from benchmarks.zoo._common import entry, hf_config, hf_model

FAMILY = "encoder"
SEQ, TINY_SEQ, TINY_VOCAB = 128, 32, 1000
# BERT-style tiny configuration (names as BertConfig spells them).
_TINY: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=128,
    vocab_size=TINY_VOCAB,
    max_position_embeddings=64,
)


def bert_large_mlm(tiny: bool) -> nn.Module:
    """BertForMaskedLM, bert-large (24 layers, width 1024): masked-LM logits."""
    large: dict[str, Any] = dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    return hf_model("BertForMaskedLM", hf_config("BertConfig", **(_TINY if tiny else large)))


def roberta_base(tiny: bool) -> nn.Module:
    """RobertaForSequenceClassification, roberta-base, 3 labels (positions offset past padding)."""
    sizes = dict(_TINY, max_position_embeddings=66) if tiny else dict(max_position_embeddings=514)
    config = hf_config("RobertaConfig", num_labels=3, **sizes)
    return hf_model("RobertaForSequenceClassification", config)


def albert_base(tiny: bool) -> nn.Module:
    """AlbertModel, albert-base (one layer's weights shared by all 12, factorised
    128-wide embeddings): last hidden state."""
    base: dict[str, Any] = dict(
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, embedding_size=128
    )
    sizes = dict(_TINY, embedding_size=32) if tiny else base
    return hf_model("AlbertModel", hf_config("AlbertConfig", **sizes), "last_hidden_state")


def distilbert_base(tiny: bool) -> nn.Module:
    """DistilBertForSequenceClassification, distilbert-base (6 layers), 2 labels."""
    small: dict[str, Any] = dict(
        dim=64, n_layers=2, n_heads=2, hidden_dim=128, vocab_size=TINY_VOCAB,
        max_position_embeddings=64,
    )  # fmt: skip
    config = hf_config("DistilBertConfig", num_labels=2, **(small if tiny else {}))
    return hf_model("DistilBertForSequenceClassification", config)


def electra_base(tiny: bool) -> nn.Module:
    """ElectraForTokenClassification, electra-base discriminator, 9 labels per token."""
    base: dict[str, Any] = dict(
        embedding_size=768, hidden_size=768, num_attention_heads=12, intermediate_size=3072
    )
    sizes = dict(_TINY, embedding_size=64) if tiny else base
    config = hf_config("ElectraConfig", num_labels=9, **sizes)
    return hf_model("ElectraForTokenClassification", config)


def deberta_v3_base(tiny: bool) -> nn.Module:
    """DebertaV2Model, deberta-v3-base (disentangled attention over log-bucketed
    relative positions): last hidden state."""
    attention: dict[str, Any] = dict(
        relative_attention=True,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        type_vocab_size=0,
    )
    if tiny:
        sizes: dict[str, Any] = dict(_TINY, position_buckets=16)
    else:
        sizes = dict(
            hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, vocab_size=128100, position_buckets=256,
        )  # fmt: skip
    config = hf_config("DebertaV2Config", **attention, **sizes)
    return hf_model("DebertaV2Model", config, "last_hidden_state")


SPECS: tuple[ModelSpec, ...] = (
    entry("bert_large_mlm", FAMILY, ["bert"], bert_large_mlm,
          tokens(SEQ, TINY_SEQ, 30522, TINY_VOCAB), train_batch=32, throughput_batch=32),
    entry("roberta_base", FAMILY, ["roberta"], roberta_base,
          tokens(SEQ, TINY_SEQ, 50265, TINY_VOCAB), train_batch=64, throughput_batch=64),
    entry("albert_base", FAMILY, ["albert"], albert_base,
          tokens(SEQ, TINY_SEQ, 30000, TINY_VOCAB), train_batch=64, throughput_batch=64,
          loss="square"),
    entry("distilbert_base", FAMILY, ["distilbert"], distilbert_base,
          tokens(SEQ, TINY_SEQ, 30522, TINY_VOCAB), train_batch=64, throughput_batch=64),
    entry("electra_base", FAMILY, ["electra"], electra_base,
          tokens(SEQ, TINY_SEQ, 30522, TINY_VOCAB), train_batch=64, throughput_batch=64),
    entry("deberta_v3_base", FAMILY, ["deberta"], deberta_v3_base,
          tokens(SEQ, TINY_SEQ, 128100, TINY_VOCAB), train_batch=32, throughput_batch=32,
          loss="square"),
)  # fmt: skip
