"""The model registry: every benchmarked model is one ``ModelSpec`` (spec.py).

``MODELS`` holds the five reference models of the published figures
(docs/performance.md; the default selection of every command), ``ZOO`` the
model zoo (zoo/, one file per family), and ``ALL_MODELS`` both: ``get_model``
looks a name up in ``ALL_MODELS``, so every command takes a zoo model by name,
and ``select_models`` expands ``zoo`` and family names (``cnn``, ``decoder``...).

Models are built from configs with random weights; nothing is downloaded
(torchvision and timm are asked for ``weights=None`` / ``pretrained=False``,
transformers models are built from a config object). Each entry has a full
variant (the GPU figures) and a tiny variant (CPU smoke runs, ``--quick``).
Dropout is off (p = 0) so that a training step is deterministic enough for the
accuracy check; timm's ViT has none by default.

To add a reference model, write a builder ``(tiny: bool) -> nn.Module`` whose
module returns one tensor, an input maker, and one ``ModelSpec`` line in
``MODELS``; a zoo model goes in its family's file under zoo/ instead.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from benchmarks.spec import InputMaker, ModelSpec, features, images, tokens
from benchmarks.zoo import FAMILIES, ZOO

__all__ = [
    "ALL_MODELS",
    "FAMILIES",
    "MODELS",
    "ZOO",
    "InputMaker",
    "ModelSpec",
    "get_model",
    "select_models",
]


class _FirstTensor(nn.Module):
    """Calls a transformers model on token ids and returns its main tensor."""

    def __init__(self, model: nn.Module, field: str) -> None:
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids)
        return getattr(out, self.field)  # type: ignore[no-any-return]


def build_resnet50(tiny: bool) -> nn.Module:
    """torchvision resnet50; tiny: one bottleneck per stage, narrow, 10 classes."""
    from torchvision.models import resnet50
    from torchvision.models.resnet import Bottleneck, ResNet

    if not tiny:
        return cast(nn.Module, resnet50(weights=None))
    return cast(nn.Module, ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, width_per_group=16))


def build_vit(tiny: bool) -> nn.Module:
    """timm vit_base_patch16_224; tiny: 32x32 images, 2 blocks of width 64."""
    import timm

    small: dict[str, Any] = dict(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2, num_classes=10
    )
    return timm.create_model("vit_base_patch16_224", pretrained=False, **(small if tiny else {}))


def build_bert(tiny: bool) -> nn.Module:
    """transformers BertModel(BertConfig()); returns last_hidden_state."""
    from transformers import BertConfig, BertModel

    small: dict[str, Any] = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    config = BertConfig(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **(small if tiny else {})
    )
    return _FirstTensor(BertModel(config), "last_hidden_state")


def gpt2_config(tiny: bool) -> Any:
    """GPT-2 small's GPT2Config without dropout or KV cache (tiny: 2 layers,
    width 64, 1000 words), as every GPT-2 benchmark builds it."""
    from transformers import GPT2Config

    small: dict[str, Any] = dict(
        n_embd=64,
        n_layer=2,
        n_head=2,
        vocab_size=1000,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    no_dropout: dict[str, Any] = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2Config(use_cache=False, **no_dropout, **(small if tiny else {}))


def build_gpt2(tiny: bool) -> nn.Module:
    """transformers GPT2LMHeadModel(GPT2Config()) without KV cache; returns logits."""
    from transformers import GPT2LMHeadModel

    return _FirstTensor(GPT2LMHeadModel(gpt2_config(tiny)), "logits")


def build_mlp(tiny: bool) -> nn.Module:
    """8 blocks of Linear(width, width), GELU, LayerNorm; width 1024 (tiny: 128)."""
    width = 128 if tiny else 1024
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*layers)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet50", build_resnet50, images(224, 32), train_batch=64),
        ModelSpec("vit_b16", build_vit, images(224, 32), train_batch=64),
        ModelSpec("bert_base", build_bert, tokens(128, 32, 30522, 1000), 32, loss="mse"),
        ModelSpec("gpt2", build_gpt2, tokens(256, 32, 50257, 1000), train_batch=16),
        ModelSpec("mlp", build_mlp, features(1024, 128), train_batch=256, loss="mse"),
    )
}


if MODELS.keys() & ZOO.keys():
    raise ValueError(f"zoo models reuse reference names: {sorted(MODELS.keys() & ZOO.keys())}")
ALL_MODELS: dict[str, ModelSpec] = {**MODELS, **ZOO}


def get_model(name: str) -> ModelSpec:
    """Looks a model (reference or zoo) up by name; the error lists the valid names."""
    try:
        return ALL_MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; choose from {sorted(ALL_MODELS)}, "
            f"'zoo', 'reference' or a family: {', '.join(FAMILIES)}"
        ) from None


def select_models(words: list[str] | None) -> list[str]:
    """Model names from names and keywords, in order, each once.

    A word is a model name, ``zoo`` (every zoo model), ``reference`` (the five
    of ``MODELS``) or a zoo family (``FAMILIES``). None or empty: ``MODELS``.
    """
    if not words:
        return list(MODELS)
    chosen: list[str] = []
    for word in words:
        if word == "zoo":
            chosen += list(ZOO)
        elif word == "reference":
            chosen += list(MODELS)
        elif word in FAMILIES:
            chosen += [name for name, spec in ZOO.items() if spec.family == word]
        else:
            chosen.append(get_model(word).name)
    return list(dict.fromkeys(chosen))
