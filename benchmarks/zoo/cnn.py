"""Convolutional networks: torchvision models with random weights.

Full variants are torchvision's ImageNet models at 224x224 (299 for
Inception v3); tiny variants keep each architecture's blocks (bottlenecks,
grouped convs, dense blocks, inverted residuals with squeeze-excitation,
ConvNeXt blocks, inception modules) at a few channels, 10 classes and 32x32
images (75 for Inception v3).
"""

from __future__ import annotations

from typing import Any, cast

from torch import nn

from benchmarks.spec import ModelSpec, images
from benchmarks.zoo._common import entry

FAMILY = "cnn"
TINY_CLASSES = 10


def resnet18(tiny: bool) -> nn.Module:
    """torchvision resnet18; tiny: one basic block per stage."""
    from torchvision.models import resnet18 as build
    from torchvision.models.resnet import BasicBlock, ResNet

    if tiny:
        return cast(nn.Module, ResNet(BasicBlock, [1, 1, 1, 1], num_classes=TINY_CLASSES))
    return cast(nn.Module, build(weights=None))


def resnext50(tiny: bool) -> nn.Module:
    """torchvision resnext50_32x4d; tiny: one bottleneck per stage, 4 groups of 4."""
    from torchvision.models import resnext50_32x4d
    from torchvision.models.resnet import Bottleneck, ResNet

    if tiny:
        return cast(
            nn.Module,
            ResNet(Bottleneck, [1, 1, 1, 1], groups=4, width_per_group=4, num_classes=TINY_CLASSES),
        )
    return cast(nn.Module, resnext50_32x4d(weights=None))


def wide_resnet50(tiny: bool) -> nn.Module:
    """torchvision wide_resnet50_2; tiny: one bottleneck per stage, inner width 2x outer/4."""
    from torchvision.models import wide_resnet50_2
    from torchvision.models.resnet import Bottleneck, ResNet

    if tiny:
        return cast(
            nn.Module,
            ResNet(Bottleneck, [1, 1, 1, 1], width_per_group=32, num_classes=TINY_CLASSES),
        )
    return cast(nn.Module, wide_resnet50_2(weights=None))


def regnet_y(tiny: bool) -> nn.Module:
    """torchvision regnet_y_1_6gf (grouped convs, squeeze-excitation); tiny: 4 blocks."""
    from torchvision.models import regnet_y_1_6gf
    from torchvision.models.regnet import BlockParams, RegNet

    if tiny:
        params = BlockParams.from_init_params(
            depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25
        )
        return cast(nn.Module, RegNet(params, num_classes=TINY_CLASSES, stem_width=16))
    return cast(nn.Module, regnet_y_1_6gf(weights=None))


def densenet121(tiny: bool) -> nn.Module:
    """torchvision densenet121; tiny: growth 8, two layers per dense block."""
    from torchvision.models import densenet121 as build
    from torchvision.models.densenet import DenseNet

    if tiny:
        return cast(
            nn.Module,
            DenseNet(
                growth_rate=8,
                block_config=(2, 2, 2, 2),
                num_init_features=16,
                bn_size=2,
                num_classes=TINY_CLASSES,
            ),
        )
    return cast(nn.Module, build(weights=None))


class _TinyVGG(nn.Module):
    """VGG's conv/BN/ReLU/max-pool stack (torchvision make_layers) with a small
    classifier: torchvision's VGG always builds a 25088x4096 first layer."""

    def __init__(self) -> None:
        super().__init__()
        from torchvision.models.vgg import make_layers

        self.features = make_layers([16, "M", 32, "M", 64, 64, "M", 128, 128, "M"], True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(128, 64), nn.ReLU(True), nn.Linear(64, TINY_CLASSES)
        )

    def forward(self, x: Any) -> Any:
        return self.classifier(self.pool(self.features(x)))


def vgg16_bn(tiny: bool) -> nn.Module:
    """torchvision vgg16_bn; tiny: 6 convs with batch norm, a 2-layer classifier."""
    from torchvision.models import vgg16_bn as build

    return _TinyVGG() if tiny else cast(nn.Module, build(weights=None, dropout=0.0))


def mobilenet_v2(tiny: bool) -> nn.Module:
    """torchvision mobilenet_v2; tiny: half width, 5 inverted-residual stages."""
    from torchvision.models import mobilenet_v2 as build

    if tiny:
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2], [6, 64, 1, 2], [6, 96, 1, 1]]
        return cast(
            nn.Module,
            build(
                weights=None,
                width_mult=0.5,
                inverted_residual_setting=setting,
                num_classes=TINY_CLASSES,
                dropout=0.0,
            ),
        )
    return cast(nn.Module, build(weights=None, dropout=0.0))


def mobilenet_v3(tiny: bool) -> nn.Module:
    """torchvision mobilenet_v3_large (hard-swish, squeeze-excitation);
    tiny: mobilenet_v3_small's layout at 1/4 width."""
    from torchvision.models import mobilenet_v3_large
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    if tiny:
        setting, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
        return cast(nn.Module, MobileNetV3(setting, last, num_classes=TINY_CLASSES, dropout=0.0))
    return cast(nn.Module, mobilenet_v3_large(weights=None, dropout=0.0))


def efficientnet_b0(tiny: bool) -> nn.Module:
    """torchvision efficientnet_b0 (MBConv, SiLU, squeeze-excitation);
    tiny: 1/4 width and depth."""
    from torchvision.models import efficientnet_b0 as build
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    if tiny:
        setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
        return cast(
            nn.Module,
            EfficientNet(
                setting,
                dropout=0.0,
                stochastic_depth_prob=0.0,
                num_classes=TINY_CLASSES,
                last_channel=last,
            ),
        )
    return cast(nn.Module, build(weights=None, dropout=0.0, stochastic_depth_prob=0.0))


def convnext_tiny(tiny: bool) -> nn.Module:
    """torchvision convnext_tiny (7x7 depthwise, LayerNorm, layer scale); tiny: 1 block a stage."""
    from torchvision.models import convnext_tiny as build
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    if tiny:
        stages = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
        return cast(
            nn.Module, ConvNeXt(stages, stochastic_depth_prob=0.0, num_classes=TINY_CLASSES)
        )
    return cast(nn.Module, build(weights=None, stochastic_depth_prob=0.0))


def googlenet(tiny: bool) -> nn.Module:
    """torchvision googlenet (inception modules), no auxiliary heads; tiny: 10 classes."""
    from torchvision.models import googlenet as build

    classes = TINY_CLASSES if tiny else 1000
    return cast(
        nn.Module,
        build(weights=None, aux_logits=False, init_weights=True, dropout=0.0, num_classes=classes),
    )


def inception_v3(tiny: bool) -> nn.Module:
    """torchvision inception_v3 (factorised 7x1/1x7 convs), no auxiliary head; tiny: 10 classes."""
    from torchvision.models import inception_v3 as build

    classes = TINY_CLASSES if tiny else 1000
    return cast(
        nn.Module,
        build(weights=None, aux_logits=False, init_weights=True, dropout=0.0, num_classes=classes),
    )


def shufflenet_v2(tiny: bool) -> nn.Module:
    """torchvision shufflenet_v2_x1_0 (channel shuffle, split); tiny: x0.5, 10 classes."""
    from torchvision.models import shufflenet_v2_x0_5, shufflenet_v2_x1_0

    if tiny:
        return cast(nn.Module, shufflenet_v2_x0_5(weights=None, num_classes=TINY_CLASSES))
    return cast(nn.Module, shufflenet_v2_x1_0(weights=None))


SPECS: tuple[ModelSpec, ...] = (
    entry("resnet18", FAMILY, ["resnet"], resnet18, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("resnext50_32x4d", FAMILY, ["resnext"], resnext50, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("wide_resnet50_2", FAMILY, ["wide_resnet"], wide_resnet50, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("regnet_y_1_6gf", FAMILY, ["regnet"], regnet_y, images(224, 32),
          train_batch=64, throughput_batch=64),
    entry("densenet121", FAMILY, ["densenet"], densenet121, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("vgg16_bn", FAMILY, ["vgg"], vgg16_bn, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("mobilenet_v2", FAMILY, ["mobilenet_v2"], mobilenet_v2, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("mobilenet_v3_large", FAMILY, ["mobilenet_v3"], mobilenet_v3, images(224, 32),
          train_batch=128, throughput_batch=64),
    entry("efficientnet_b0", FAMILY, ["efficientnet"], efficientnet_b0, images(224, 32),
          train_batch=64, throughput_batch=64),
    entry("convnext_tiny", FAMILY, ["convnext"], convnext_tiny, images(224, 32),
          train_batch=64, throughput_batch=32),
    entry("googlenet", FAMILY, ["inception"], googlenet, images(224, 32),
          train_batch=64, throughput_batch=64),
    entry("inception_v3", FAMILY, ["inception"], inception_v3, images(299, 75),
          train_batch=64, throughput_batch=32),
    entry("shufflenet_v2", FAMILY, ["shufflenet"], shufflenet_v2, images(224, 32),
          train_batch=128, throughput_batch=64),
)  # fmt: skip
