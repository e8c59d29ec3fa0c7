"""Stage 5: the capability registry."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend
from mybackend import _C
from mybackend.lowering import lower


def test_supported_ops_is_sorted_and_classified() -> None:
    ops = mybackend.supported_ops()
    names = [name for name, _ in ops]
    assert names == sorted(names) and len(names) == len(set(names))
    classes = dict(ops)
    assert classes["aten::add.Tensor"] == "pointwise"
    assert classes["aten::sum.dim_IntList"] == "reduction"
    assert classes["aten::native_layer_norm.default"] == "normalization"
    assert classes["aten::mm.default"] == "matmul"
    assert classes["aten::convolution.default"] == "convolution"
    assert classes["aten::view.default"] == "view"


def test_every_registered_op_exists_in_the_dispatcher() -> None:
    for name, _ in mybackend.supported_ops():
        namespace, rest = name.split("::")
        op_name, overload = rest.split(".")
        packet = getattr(getattr(torch.ops, namespace), op_name)
        assert hasattr(packet, overload), name


def test_reasons() -> None:
    graph = lower(
        make_fx(lambda x: (x.exp(), x.to(torch.complex64).exp(), x.cumsum(0)))(torch.randn(3)), []
    ).graph
    text = graph.to_text().splitlines()
    exp_node = next(i for i, line in enumerate(text[1:]) if "aten::exp" in line)
    assert _C.check_support(graph, exp_node) is None
    reasons = [_C.check_support(graph, i) for i in range(graph.num_nodes)]
    assert any(r and "dtype complex64" in r for r in reasons), reasons
    assert any(r and "aten::cumsum.default is not in the capability registry" in r for r in reasons)
    assert "disabled by option" in _C.check_support(
        graph, exp_node, {"disabled_op_classes": ["pointwise"]}
    )


def test_gradients_an_output_mask_leaves_out_are_no_reason_to_refuse() -> None:
    def ln_backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [8], w, None, 1e-5)
        dx, dw, _ = torch.ops.aten.native_layer_norm_backward(
            g, x, [8], mean, rstd, w, None, [True, True, False]
        )
        return dx + dw

    graph = lower(make_fx(ln_backward)(torch.randn(2, 8), torch.randn(2, 8), torch.randn(8)), [])
    text = graph.graph.to_text().splitlines()
    node = next(i for i, line in enumerate(text[1:]) if "native_layer_norm_backward" in line)
    assert "opaque" in text[node + 1]  # the grad_bias nobody asked for
    assert _C.check_support(graph.graph, node) is None


def test_ops_doc_matches_registry() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "ops.md").read_text()
    for name, op_class in mybackend.supported_ops():
        assert f"| `{name}` | {op_class} |" in doc, (
            f"docs/ops.md misses {name}: run tools/gen_docs.py"
        )
