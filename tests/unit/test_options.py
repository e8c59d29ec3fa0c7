from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import mybackend
from mybackend import Options
from mybackend.options import _NON_CUDNN_SDPA_OPS, MODES, OP_CLASSES, mode_preset

ROOT = Path(__file__).parents[2]


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
    doc = (ROOT / "docs" / "options.md").read_text()
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


# --- validation of values (issue 32) ----------------------------------------


def test_options_that_are_not_a_mapping_are_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^mybackend: options must be a dict") as info:
        Options.from_user(None, [("strict", True)])  # type: ignore[arg-type]
    message = str(info.value)
    assert "got list" in message and "options={'strict': True}" in message


def test_option_names_must_be_strings() -> None:
    with pytest.raises(TypeError, match=r"^mybackend: option names are str, got int 1"):
        Options.from_user(None, {1: True})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [("strict", "yes", "bool, got str 'yes'"),
     ("max_cuda_graphs", 2.5, "int >= 1, got float 2.5"),
     ("min_partition_size", 0, "int >= 1, got int 0"),
     ("dump_dir", 3, "str | None, got int 3"),
     ("disabled_op_classes", ["matmul", 7],
      "tuple[str, ...] (a list or tuple of names), got list ['matmul', 7]")],
)  # fmt: skip
def test_type_errors_name_the_key_the_type_and_the_value(
    key: str, value: object, expected: str
) -> None:
    with pytest.raises(TypeError) as info:
        Options.from_user(None, {key: value})
    assert str(info.value).startswith(f"mybackend: option {key!r} takes {expected}")


@pytest.mark.parametrize(
    ("key", "value"), [("disabled_ops", "aten::mul.Tensor"), ("disabled_op_classes", "matmul")]
)
def test_a_string_where_names_are_expected_is_a_type_error(key: str, value: str) -> None:
    """A str is a sequence of str: it must not be read as one-letter names."""
    with pytest.raises(TypeError) as info:
        Options.from_user(None, {key: value})
    assert f"got str {value!r}; for one name write [{value!r}]" in str(info.value)


def test_op_class_list_matches_the_core() -> None:
    # Every class the extension reports names one of ours...
    assert {op_class for _, op_class in mybackend.supported_ops()} <= set(OP_CLASSES)
    # ...and ours are exactly op_class_name()'s, including the classes (such
    # as "other") that no registered op has, which the bindings cannot show.
    source = (ROOT / "src_cpp" / "capability" / "registry.cpp").read_text()
    body = source.split("std::string_view op_class_name(OpClass op_class) {", 1)[1]
    body = body.split("\n}\n", 1)[0]
    assert tuple(re.findall(r'case OpClass::\w+: return "(\w+)";', body)) == OP_CLASSES


def test_unknown_op_class_suggests_the_nearest() -> None:
    with pytest.raises(ValueError, match=r"^mybackend: ") as info:
        Options.from_user(None, {"disabled_op_classes": ("pointwize",)})
    message = str(info.value)
    assert "'pointwize'" in message and "Did you mean 'pointwise'?" in message
    assert ", ".join(OP_CLASSES) in message  # and lists the valid ones


def _suggestions(message: str) -> list[str]:
    hint = re.search(r"Did you mean (?:one of )?(.*?)\?", message)
    assert hint, message
    return re.findall(r"'([^']+)'", hint.group(1))


@pytest.mark.parametrize("value", ["mul", "aten::mul", "aten::mul.default", "aten.mul.Tensor"])
def test_unknown_overload_of_a_known_op_suggests_its_overloads(value: str) -> None:
    with pytest.raises(ValueError, match=r"^mybackend: ") as info:
        Options.from_user(None, {"disabled_ops": ["aten::exp.default", value]})
    message = str(info.value)
    assert repr(value) in message and "mybackend.supported_ops()" in message
    registered = sorted(op for op, _ in mybackend.supported_ops() if op.startswith("aten::mul."))
    assert {"aten::mul.Tensor", "aten::mul.Scalar"} <= set(registered)
    assert _suggestions(message) == registered


@pytest.mark.parametrize("value", ["aten::not_an_op.default", "aten::mull.Tensor"])
def test_unknown_op_names_the_value_and_valid_neighbours(value: str) -> None:
    with pytest.raises(ValueError, match=r"^mybackend: ") as info:
        Options.from_user(None, {"disabled_ops": (value,)})
    message = str(info.value)
    assert repr(value) in message
    known = {op for op, _ in mybackend.supported_ops()}
    suggestions = _suggestions(message)
    assert suggestions and set(suggestions) <= known, message
    if value == "aten::mull.Tensor":
        assert "aten::mul.Tensor" in suggestions


def test_valid_names_are_accepted() -> None:
    every_op = [op for op, _ in mybackend.supported_ops()]
    options = Options.from_user(
        None, {"disabled_ops": every_op, "disabled_op_classes": list(OP_CLASSES)}
    )
    assert options.disabled_ops == tuple(every_op)
    assert options.core_options()["disabled_op_classes"] == list(OP_CLASSES)
    # The SDPA ops Options disables itself are valid names whatever the registry holds.
    sdpa = Options.from_user(None, {"disabled_ops": _NON_CUDNN_SDPA_OPS})
    assert sdpa.disabled_ops == _NON_CUDNN_SDPA_OPS


def test_torch_compile_reports_a_bad_value_to_the_user() -> None:
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(
        model, backend="mybackend", options={"disabled_op_classes": ("pointwize",)}
    )
    with pytest.raises(Exception, match=r"'pointwize'.*Did you mean 'pointwise'\?") as info:
        compiled(torch.randn(2, 4))
    # dynamo wraps it in BackendCompilerFailed, which keeps our ValueError.
    assert isinstance(getattr(info.value, "inner_exception", info.value), ValueError)
