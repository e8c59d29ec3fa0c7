"""Stage 4: the IR's text form, structural hash and verifier."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower


def _graph(fn, *inputs):  # type: ignore[no-untyped-def]
    return lower(make_fx(fn, tracing_mode="fake")(*inputs), []).graph


def test_structural_hash_is_stable_and_structural() -> None:
    a = _graph(lambda x: torch.exp(x) + 1, torch.randn(4))
    b = _graph(lambda y: torch.exp(y) + 1, torch.randn(4))  # other names, same structure
    c = _graph(lambda x: torch.exp(x) + 2, torch.randn(4))
    d = _graph(lambda x: torch.exp(x) + 1, torch.randn(5))
    assert a.structural_hash() == b.structural_hash()
    assert len({a.structural_hash(), c.structural_hash(), d.structural_hash()}) == 3


def test_debug_text_has_names_but_hash_ignores_them() -> None:
    g = _graph(lambda x: torch.exp(x), torch.randn(4))
    assert "# exp" in g.to_text(True)
    assert "#" not in g.to_text(False)


def test_float_arguments_keep_their_kind() -> None:
    text = _graph(lambda x: x * 2.0, torch.randn(4)).to_text()
    assert "aten::mul.Tensor(%0, 2.0)" in text


def test_builder_requires_outputs() -> None:
    builder = _C.GraphBuilder()
    builder.add_input(("tensor", "float32", "cpu", [2], [1], "x"))
    try:
        builder.build()
    except _C.Error as error:
        assert "outputs were never set" in str(error)
    else:
        raise AssertionError("build() without outputs must fail")


def test_symbolic_dims_print_infix() -> None:
    builder = _C.GraphBuilder()
    builder.add_input(("tensor", "float32", "cpu", ["s0", "(mul 2 s1)"], ["(mul 2 s1)", 1], "x"))
    builder.set_outputs([])
    assert "f32[s0, (2*s1)]{(2*s1), 1} cpu" in builder.build().to_text()
