"""Vision transformers and conv-attention hybrids: timm models with random weights.

Full variants are timm's ImageNet configurations at 224x224 (256 for
MobileViT); tiny variants keep each architecture (class and distillation
tokens, shifted windows, relative position bias, attention biases, token
mixing, gated positional self-attention, MBConv + attention stages) at 1-2
blocks a stage, widths of 32-64, 10 classes and 32x32 images (64 where the
architecture downsamples by 32 before attending).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from benchmarks.spec import ModelSpec, images
from benchmarks.zoo._common import entry

FAMILY = "vision_transformer"
# Patch-8 ViT-style models on 32x32 images: 16 tokens of width 64.
_SMALL_VIT: dict[str, Any] = dict(
    img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2, num_classes=10
)


def _timm(name: str, tiny: bool, small: dict[str, Any]) -> nn.Module:
    """``timm.create_model(name)`` without pretrained weights or drop path,
    with ``small`` overriding its configuration for the tiny variant."""
    import timm

    kwargs = dict(small) if tiny else {}
    return timm.create_model(name, pretrained=False, drop_path_rate=0.0, **kwargs)


def vit_s16(tiny: bool) -> nn.Module:
    """timm vit_small_patch16_224 (class token, pre-norm blocks)."""
    return _timm("vit_small_patch16_224", tiny, _SMALL_VIT)


def deit_s16_distilled(tiny: bool) -> nn.Module:
    """timm deit_small_distilled_patch16_224: class and distillation tokens, two heads averaged."""
    return _timm("deit_small_distilled_patch16_224", tiny, _SMALL_VIT)


def swin_t(tiny: bool) -> nn.Module:
    """timm swin_tiny_patch4_window7_224: shifted windows, relative position bias, patch merging."""
    small = dict(
        img_size=32, patch_size=2, window_size=4, embed_dim=32, depths=(1, 1),
        num_heads=(2, 4), num_classes=10,
    )  # fmt: skip
    return _timm("swin_tiny_patch4_window7_224", tiny, small)


def beit_b16(tiny: bool) -> nn.Module:
    """timm beit_base_patch16_224: relative position bias per block, layer scale, mean pooling."""
    return _timm("beit_base_patch16_224", tiny, _SMALL_VIT)


def levit_128s(tiny: bool) -> nn.Module:
    """timm levit_128s: conv stem, attention with learned biases, hard-swish,
    subsampling attention between stages."""
    small = dict(
        img_size=64, embed_dim=(32, 48, 64), key_dim=8, num_heads=(2, 2, 2), depth=(1, 1, 1),
        num_classes=10,
    )  # fmt: skip
    return _timm("levit_128s", tiny, small)


def mixer_b16(tiny: bool) -> nn.Module:
    """timm mixer_b16_224: token-mixing and channel-mixing MLPs, no attention."""
    if tiny:  # mixer_b16_224 fixes the patch size: build timm's class directly
        from timm.models.mlp_mixer import MlpMixer

        return MlpMixer(img_size=32, patch_size=8, num_blocks=2, embed_dim=64, num_classes=10)
    return _timm("mixer_b16_224", tiny, {})


def convit_tiny(tiny: bool) -> nn.Module:
    """timm convit_tiny: gated positional self-attention (a soft convolutional
    prior) in the early blocks."""
    small = dict(
        img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, local_up_to_layer=1,
        num_classes=10,
    )  # fmt: skip
    return _timm("convit_tiny", tiny, small)


def coatnet_0(tiny: bool) -> nn.Module:
    """timm coatnet_0_rw_224: MBConv stages, then transformer stages with
    relative position bias; tiny: coatnet_nano_rw_224's layout on 64x64 images."""
    import timm

    small: dict[str, Any] = dict(img_size=64, num_classes=10)
    name = "coatnet_nano_rw_224" if tiny else "coatnet_0_rw_224"
    return timm.create_model(name, pretrained=False, drop_path_rate=0.0, **(small if tiny else {}))


def mobilevit_s(tiny: bool) -> nn.Module:
    """timm mobilevit_s: MobileNetV2 blocks and transformer blocks over unfolded
    patches, 256x256 images; tiny: mobilevit_xxs on 64x64 images."""
    import timm

    small: dict[str, Any] = dict(img_size=64, num_classes=10)
    name = "mobilevit_xxs" if tiny else "mobilevit_s"
    return timm.create_model(name, pretrained=False, drop_path_rate=0.0, **(small if tiny else {}))


SPECS: tuple[ModelSpec, ...] = (
    entry("vit_s16", FAMILY, ["vit"], vit_s16, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("deit_s16_distilled", FAMILY, ["deit"], deit_s16_distilled, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("swin_t", FAMILY, ["swin"], swin_t, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("beit_b16", FAMILY, ["beit"], beit_b16, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("levit_128s", FAMILY, ["levit", "hybrid"], levit_128s, images(224, 64),
          train_batch=128, throughput_batch=64),
    entry("mixer_b16", FAMILY, ["mlp_mixer"], mixer_b16, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("convit_tiny", FAMILY, ["convit", "hybrid"], convit_tiny, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("coatnet_0", FAMILY, ["coatnet", "hybrid"], coatnet_0, images(224, 64),
          train_batch=64, throughput_batch=32),
    entry("mobilevit_s", FAMILY, ["mobilevit", "hybrid"], mobilevit_s, images(256, 64),
          train_batch=64, throughput_batch=64),
)  # fmt: skip
