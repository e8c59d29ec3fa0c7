from __future__ import annotations

import dataclasses

import pytest
import torch

from mybackend import Options
from mybackend.options import MODES, mode_preset


def test_defaults_and_modes() -> None:
    assert Options.from_user() == Options()
    assert Options.from_user("reduce-overhead").cuda_graphs is True
    tuned = Options.from_user("max-autotune")
    assert tuned.cuda_graphs and tuned.autotune
    assert tuned.core_options([])["autotune"] is True  # reaches the matmul planner
    assert Options().core_options([])["autotune"] is False
    for mode in MODES:
        Options.from_user(mode)


def test_everything_a_mode_sets_is_an_option() -> None:
    for mode in MODES:
        preset = mode_preset(mode)
        assert Options.from_user(None, preset) == Options.from_user(mode)


def test_unknown_option_lists_valid_ones_and_suggests() -> None:
    with pytest.raises(ValueError, match="Did you mean 'min_partition_size'") as info:
        Options.from_user(None, {"min_partition_sise": 3})
    assert "strict" in str(info.value) and "disabled_ops" in str(info.value)


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match=r"unknown mode 'fast'.*reduce-overhead"):
        Options.from_user("fast")


@pytest.mark.parametrize(
    ("key", "value"),
    [("strict", 1), ("min_partition_size", "2"), ("min_partition_size", 0),
     ("disabled_ops", "aten::mul.Tensor"), ("dump_dir", 3)],
)  # fmt: skip
def test_wrong_type_is_rejected(key: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"option '{key}' takes"):
        Options.from_user(None, {key: value})


def test_options_are_frozen_and_documented() -> None:
    options = Options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strict = True  # type: ignore[misc]
    for field in dataclasses.fields(Options):
        assert field.metadata["help"], field.name
        assert isinstance(field.metadata["affects_codegen"], bool)


def test_torch_compile_passes_options_through() -> None:
    compiled = torch.compile(lambda x: x + 1, backend="mybackend", options={"bogus": 1})
    with pytest.raises(Exception, match="unknown option 'bogus'"):
        compiled(torch.ones(2))


def test_options_doc_lists_every_field() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "options.md").read_text()
    for name in Options.field_names():
        assert f"`{name}`" in doc, name


def test_without_cudnn_attention_only_torchs_own_cudnn_sdpa_ops_are_planned() -> None:
    """docs/design/0009-attention.md: the flash and memory-efficient SDPA ops
    stay out of partitions unless cudnn_attention is set; the aten cuDNN
    ops, whose kernels are cuDNN's either way, are never disabled by it."""
    flash = "aten::_scaled_dot_product_flash_attention_backward.default"
    cudnn = "aten::_scaled_dot_product_cudnn_attention_backward.default"
    default = Options().core_options([])
    assert flash in default["disabled_ops"] and cudnn not in default["disabled_ops"]
    assert "attention" not in default["disabled_op_classes"]
    opted_in = Options.from_user(None, {"cudnn_attention": True}).core_options([])
    assert not any("scaled_dot_product" in op for op in opted_in["disabled_ops"])
    user = Options.from_user(None, {"disabled_ops": [flash]}).core_options([])
    assert user["disabled_ops"].count(flash) == 1  # the user's entry is not repeated
