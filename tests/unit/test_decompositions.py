"""Stage 2's decomposition tables, one per device (Note [Eager's kernels on
the CPU] in mybackend/decompositions.py): graphs whose tensors are all on the
CPU keep ATen's ops whole; CUDA graphs keep core ATen's table with
mybackend's changes."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from mybackend.decompositions import (
    ADDED,
    CPU_TABLE,
    KEPT_WHOLE,
    batch_norm_inference,
    decomposition_table,
    graph_devices,
)
from mybackend.ops.batch_norm import batch_norm_backward, batch_norm_training
from mybackend.ops.group_norm import group_norm
from tests.testing import compiled_records

aten = torch.ops.aten

# Core ATen decomposes these, and the decomposition rounds differently from
# ATen's CPU kernel (measured, fp32): batch-norm backward by up to 2.3e-5,
# group-norm backward 2.5e-5, the others an ulp or two. threshold_backward
# (ReLU's gradient) is exact either way, and whole all the same.
DECOMPOSED_ON_CUDA_ONLY = (
    aten.gelu_backward.default,
    aten.silu.default,
    aten.silu_backward.default,
    aten.mish_backward.default,
    aten.tanh_backward.default,
    aten.native_group_norm_backward.default,
    aten.nll_loss_forward.default,
    aten.addcmul.default,
    aten.threshold_backward.default,
)


def _fake_cuda(*shape: int) -> torch.Tensor:
    with FakeTensorMode():
        return torch.empty(shape, device="cuda")


def test_cpu_graphs_get_the_cpu_table() -> None:
    table = decomposition_table([torch.randn(2, 3), 4])
    assert table is CPU_TABLE
    for op in DECOMPOSED_ON_CUDA_ONLY:
        assert op not in table, op
    assert aten._native_batch_norm_legit_no_training.default not in table
    # Only mybackend's training batch-norm and group-norm rewrites, which
    # decline on the CPU (batch_norm.REWRITTEN_DEVICES): the ops stay whole
    # there too.
    assert table == {
        aten._native_batch_norm_legit_functional.default: batch_norm_training,
        aten.native_batch_norm_backward.default: batch_norm_backward,
        aten.native_group_norm.default: group_norm,
    }


def test_cuda_graphs_keep_the_full_table() -> None:
    table = decomposition_table([_fake_cuda(2, 3)])
    assert table is decomposition_table()  # no arguments: the full table
    for op in DECOMPOSED_ON_CUDA_ONLY:
        assert op in table, op
    # (Not compared with a fresh core_aten_decompositions(): torch registers
    # more decompositions as its modules load, after the table was cached.)
    assert not {str(op) for op in table} & set(KEPT_WHOLE)
    assert table[aten.native_batch_norm_backward.default] is batch_norm_backward
    assert table[aten._native_batch_norm_legit_no_training.default] is batch_norm_inference
    assert all(table[op] is fn for op, fn in ADDED.items())


def test_any_cuda_tensor_or_none_at_all_gives_the_full_table() -> None:
    full = decomposition_table()
    assert decomposition_table([torch.randn(2), _fake_cuda(2)]) is full
    assert decomposition_table([]) is full  # no tensor: nothing says CPU
    assert decomposition_table([3, 4.0]) is full

    # CPU inputs, but the graph makes a CUDA tensor: the value dynamo records
    # on the node says so.
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    add.meta["example_value"] = _fake_cuda(2)
    assert graph_devices([torch.randn(2)], gm) == {"cpu", "cuda"}
    assert decomposition_table([torch.randn(2)], gm) is full
    add.meta["example_value"] = torch.randn(2)
    assert decomposition_table([torch.randn(2)], gm) is CPU_TABLE


def test_graph_devices_reads_parameters_and_nested_values() -> None:
    gm = torch.fx.symbolic_trace(nn.Linear(2, 2))
    assert graph_devices([], gm) == {"cpu"}
    assert graph_devices([[torch.randn(1), (_fake_cuda(1),)]]) == {"cpu", "cuda"}


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.gn = nn.GroupNorm(4, 8)
        self.b = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.a(x))
        h = F.mish(self.gn(h.view(-1, 8, 4))).flatten(1)
        return self.b(F.silu(h) + torch.relu(h))


def _ops(ir_text: str) -> set[str]:
    return set(re.findall(r"aten::\w+\.\w+", ir_text))


def test_compiled_cpu_training_graphs_keep_atens_ops_whole() -> None:
    """Through the backend (aot.py passes the graph and its inputs): the
    forward and backward graphs hold the ops core ATen would decompose."""
    model = _Block()
    compiled = torch.compile(
        lambda x, y: F.cross_entropy(model(x), y), backend="mybackend", options={"strict": True}
    )
    loss, forward = compiled_records(
        lambda: compiled(torch.randn(4, 16), torch.tensor([1, 2, 3, 4]))
    )
    _, backward = compiled_records(lambda: loss.backward())
    assert [r.kind for r in forward] == ["forward"] and [r.kind for r in backward] == ["backward"]
    forward_ops, backward_ops = _ops(forward[0].ir_text), _ops(backward[0].ir_text)
    assert {"aten::silu.default", "aten::nll_loss_forward.default"} <= forward_ops, forward_ops
    assert {
        "aten::gelu_backward.default",
        "aten::silu_backward.default",
        "aten::mish_backward.default",
        "aten::native_group_norm_backward.default",
        "aten::threshold_backward.default",
    } <= backward_ops, backward_ops


def test_compiled_cpu_batch_norm_stays_whole_in_training_and_inference() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = torch.randn(2, 3, 8, 8)
    out, forward = compiled_records(lambda: compiled(x))
    _, backward = compiled_records(lambda: out.sum().backward())
    assert "aten::_native_batch_norm_legit_functional.default" in _ops(forward[0].ir_text)
    assert "aten::native_batch_norm_backward.default" in _ops(backward[0].ir_text)
    model.eval()
    with torch.no_grad():
        _, inference = compiled_records(lambda: compiled(x))
    assert [r.kind for r in inference] == ["inference"]
    assert "aten::_native_batch_norm_legit_no_training.default" in _ops(inference[0].ir_text)


@pytest.mark.gpu
def test_compiled_cuda_training_graphs_decompose_as_before() -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.SiLU()).cuda()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    out, _ = compiled_records(lambda: compiled(torch.randn(4, 16, device="cuda")))
    _, backward = compiled_records(lambda: out.sum().backward())
    ops = _ops(backward[0].ir_text)
    assert not {"aten::gelu_backward.default", "aten::silu_backward.default"} & ops, ops
