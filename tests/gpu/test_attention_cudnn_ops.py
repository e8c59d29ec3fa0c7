"""GPU-marked: torch's own cuDNN SDPA ops, run as mybackend's cuDNN graphs.

Where it can, torch 2.11 lowers F.scaled_dot_product_attention on Hopper to
``_scaled_dot_product_cudnn_attention`` and its backward. Those kernels are
cuDNN's either way, so the attention planner takes the pair with default
options (``cudnn_attention`` governs only the flash and memory-efficient
ops): running them as its own graphs lets a backward write its gradients
straight into the concatenation that stacks them (Note [Gradients written
stacked]). Each case forces the cuDNN backend, compares with eager (the same
cuDNN kernels, so close agreement) and asserts from the run counters that
the groups ran and nothing fell back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tests.testing import compiled_records
from tests.unit.test_passes_permuted_cats import _Attention

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
B, H = 2, 4


@pytest.fixture(autouse=True)
def _cudnn_attention_only() -> Iterator[None]:
    torch._dynamo.reset()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        yield


def _stats(records: list[Any]) -> dict[str, int]:
    keys = ("attention_groups_run", "attention_fallbacks")
    return {k: sum(r.compiled.stats()[k] for r in records if r.compiled) for k in keys}


def _attention_ops(records: list[Any]) -> list[list[str]]:
    """The ops of each attention group the records planned."""
    groups = []
    for r in records:
        if not r.compiled:
            continue
        report = r.compiled.report()
        ops = [n["op"] for n in report["nodes"]]
        for kernel in report["kernels"]:
            if kernel["kind"] == "attention":
                groups.append(sorted(ops[i] for i in kernel["nodes"]))
    return groups


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_the_aten_cudnn_pair_runs_as_cudnn_graphs_by_default(dtype_name: str, mask: str) -> None:
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (
        torch.randn(B, H, 256, 64, device="cuda", generator=gen).to(dtype).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(B, H, 256, 64, device="cuda", generator=gen).to(dtype)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")

    def forward_backward(f: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
        for t in (q, k, v):
            t.grad = None
        out = f(q, k, v)
        out.backward(grad)
        return [out.detach(), q.grad, k.grad, v.grad]

    compiled = torch.compile(fn, backend="mybackend", options={"strict": True})
    got, records = compiled_records(lambda: forward_backward(compiled))
    want = forward_backward(fn)
    for name, g, w in zip(["out", "dq", "dk", "dv"], got, want, strict=True):
        assert _relative_error(g, w) < 1e-2, name
    assert _stats(records) == {"attention_groups_run": 2, "attention_fallbacks": 0}
    ops = _attention_ops(records)
    assert sorted(o for group in ops for o in group) == [
        "aten::_scaled_dot_product_cudnn_attention.default",
        "aten::_scaled_dot_product_cudnn_attention_backward.default",
    ], ops


def test_the_qkv_gradient_is_written_by_the_attention_backward() -> None:
    """Note [Gradients written stacked]: a ViT attention's backward writes dq,
    dk and dv into the qkv projection's layout; the concatenation runs no
    kernel of its own, and the gradients match eager's."""
    torch.manual_seed(0)
    eager = _Attention(dim=256, heads=4).cuda().to(torch.bfloat16)
    model = _Attention(dim=256, heads=4).cuda().to(torch.bfloat16)
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16)

    def step(m: torch.nn.Module) -> list[torch.Tensor]:
        m.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        m(xi).float().square().sum().backward()
        return [xi.grad, *(p.grad for p in m.parameters())]

    want = step(eager)
    got, records = compiled_records(lambda: step(compiled))
    for g, w in zip(got, want, strict=True):
        assert _relative_error(g, w) < 2e-2
    assert _stats(records) == {"attention_groups_run": 2, "attention_fallbacks": 0}
    # Note [Permuted concatenations] left one cat in the projection's layout ...
    (backward,) = [r for r in records if r.kind == "backward"]
    cats = backward.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cat.default)
    assert [c.meta["val"].shape for c in cats] == [(4, 64, 3, 4, 64)], backward.gm.code
    # ... which the attention backward's group writes.
    (backward_group,) = [g for g in _attention_ops(records) if "aten::cat.default" in g]
    assert backward_group.count("aten::permute.default") == 3, backward_group
    # A second step reuses the plan and the stacked layout.
    again = step(compiled)
    for g, w in zip(again, want, strict=True):
        assert _relative_error(g, w) < 2e-2
