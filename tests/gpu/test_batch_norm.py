"""GPU-marked: training batch norm's generated reductions (Note [Training
batch norm], Note [Batch-norm reductions], device/mb_batch_norm.cuh).

The op tests compile each reduction alone and check generated_norms_run, so
a pass means the generated kernel ran, not the op's ATen implementation; the
module tests train batch norm + ReLU through the backend against eager,
running statistics included, in default and reduce-overhead modes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from mybackend.ops.batch_norm import batch_norm_backward_reduce, batch_norm_stats
from tests.testing import compiled_records, error_ratio_check, run_generated_norm

pytestmark = [pytest.mark.gpu]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# Per-channel fp32 sums over up to 10^6 values, in another order than ATen's.
STAT_TOL = {"rtol": 1e-4, "atol": 1e-5}
OUT_TOL = {F32: {"rtol": 1e-4, "atol": 1e-4}, F16: {"rtol": 2e-3, "atol": 2e-3}}
OUT_TOL[BF16] = {"rtol": 1.6e-2, "atol": 1.6e-2}


def _activation(shape: tuple[int, ...], dtype: torch.dtype, offset: float = 3.0) -> torch.Tensor:
    """Channels innermost in memory; channel c has mean ~c*offset/C so that a
    one-pass sum of squares would lose digits where Welford's does not."""
    channels = shape[1]
    x = torch.randn(shape, device="cuda") + torch.linspace(0, offset, channels, device="cuda").view(
        [1, channels] + [1] * (len(shape) - 2)
    )
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    x = x.to(dtype)
    return x.to(memory_format=formats[len(shape)]) if len(shape) in formats else x


# (rows, channels) views: 64 channels of ResNet's stem; 3 (the general,
# scalar variant); 2048 (one column tile of 256 lanes); 2312 (two tiles, the
# second partial); a 2-d batch; a 5-d volume.
SHAPES = [
    (8, 64, 28, 28),
    (5, 3, 7, 9),
    (4, 2048, 7, 7),
    (3, 2312, 3, 5),
    (300, 64),
    (2, 16, 3, 5, 7),
]


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_statistics_kernel_matches_the_ops_aten_implementation(
    dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    x = _activation(shape, dtype)
    running_mean = torch.randn(shape[1], device="cuda")
    running_var = torch.rand(shape[1], device="cuda") + 0.5

    def stats(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.mybackend.batch_norm_stats(x, m, v, 0.1, 1e-5)

    got = run_generated_norm(stats, x, running_mean, running_var)
    want = batch_norm_stats(x, running_mean, running_var, 0.1, 1e-5)
    for name, g, w in zip(
        ["mean", "invstd", "running_mean", "running_var"], got, want, strict=True
    ):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        torch.testing.assert_close(g, w, **STAT_TOL, msg=name)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_sums_kernel_matches_the_ops_aten_implementation(
    dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    x = _activation(shape, dtype)
    grad = _activation(shape, dtype, offset=1.0)
    var, mean = torch.var_mean(x.float(), [0, *range(2, len(shape))], correction=0)
    invstd = torch.rsqrt(var + 1e-5)
    got = run_generated_norm(torch.ops.mybackend.batch_norm_backward_reduce, grad, x, mean, invstd)
    want = batch_norm_backward_reduce(grad, x, mean, invstd)
    atol = 1e-3 * (x.numel() / shape[1]) ** 0.5
    for name, g, w in zip(["grad_bias", "grad_weight"], got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=atol, msg=name)


def _relu_gradient(relu_out: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    zero = torch.ops.aten.scalar_tensor.default(0, dtype=dy.dtype, device=dy.device)
    return torch.where(relu_out <= 0, zero, dy)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_sums_compute_the_relu_gradient_as_they_load(
    dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    """Note [Gradient readers]: the sums read where(relu_out <= 0, 0, dy)
    through a prologue, never stored; the same values as the ops in eager."""
    x = _activation(shape, dtype)
    relu_out = torch.relu(_activation(shape, dtype, offset=-1.0))
    dy = _activation(shape, dtype, offset=1.0)
    var, mean = torch.var_mean(x.float(), [0, *range(2, len(shape))], correction=0)
    invstd = torch.rsqrt(var + 1e-5)

    def sums(r: torch.Tensor, g: torch.Tensor, x: torch.Tensor, m: torch.Tensor, s: torch.Tensor):
        return torch.ops.mybackend.batch_norm_backward_reduce(_relu_gradient(r, g), x, m, s)

    got = run_generated_norm(sums, relu_out, dy, x, mean, invstd)
    want = batch_norm_backward_reduce(_relu_gradient(relu_out, dy), x, mean, invstd)
    atol = 1e-3 * (x.numel() / shape[1]) ** 0.5
    for name, g, w in zip(["grad_bias", "grad_weight"], got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=atol, msg=name)


def test_a_contiguous_input_at_run_time_is_read_through_a_copy() -> None:
    """Planned for channels-last, called with NCHW data: still right."""
    planned = _activation((4, 32, 5, 6), F32)
    stats = (torch.zeros(32, device="cuda"), torch.ones(32, device="cuda"))
    # Distinct tensors: make_fx traces one tensor passed twice as one input.
    traced = make_fx(torch.ops.mybackend.batch_norm_backward_reduce, tracing_mode="fake")(
        planned, planned.clone(), *stats
    )
    lowered = lower(traced, [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    x, grad = planned.contiguous(), torch.randn(4, 32, 5, 6, device="cuda")
    mean, invstd = x.mean([0, 2, 3]), torch.rand(32, device="cuda") + 0.5
    got = compiled.run([grad, x, mean, invstd])
    for g, w in zip(got, batch_norm_backward_reduce(grad, x, mean, invstd), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert compiled.stats()["generated_norms_run"] == 1


def _norm_relu(dims: int, channels: int, dtype: torch.dtype) -> nn.Module:
    norm = {2: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[dims](channels, momentum=0.2)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return nn.Sequential(norm, nn.ReLU()).cuda().to(dtype)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("shape", [(16, 64, 14, 14), (300, 96), (2, 24, 3, 5, 7)], ids=str)
def test_training_matches_eager_with_running_statistics(
    mode: str, dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    eager = _norm_relu(len(shape), shape[1], dtype)
    compiled_module = copy.deepcopy(eager)
    options = {"strict": True, "cuda_graphs": mode == "reduce-overhead"}
    compiled = torch.compile(compiled_module, backend="mybackend", options=options)
    tol = OUT_TOL[dtype]
    for step in range(3):
        x = _activation(shape, dtype, offset=step + 1.0)
        x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
        grad = torch.randn(shape, device="cuda", dtype=dtype)
        y_eager, y_compiled = eager(x_eager), compiled(x_compiled)
        y_eager.backward(grad)
        y_compiled.backward(grad)
        torch.testing.assert_close(y_compiled, y_eager, **tol)
        torch.testing.assert_close(x_compiled.grad, x_eager.grad, **tol)
    grads = zip(eager.named_parameters(), compiled_module.parameters(), strict=True)
    for (name, p_eager), p_compiled in grads:
        torch.testing.assert_close(p_compiled.grad, p_eager.grad, rtol=2e-2, atol=2e-2, msg=name)
    buffers = zip(eager.named_buffers(), compiled_module.buffers(), strict=True)
    for (name, b_eager), b_compiled in buffers:
        torch.testing.assert_close(b_compiled, b_eager, **STAT_TOL, msg=name)


@pytest.mark.parametrize("layout", ["channels_last", "nchw"])
def test_training_step_launches_no_aten_batch_norm_kernel(layout: str) -> None:
    """conv -> batch norm -> ReLU under autocast: the step's batch-norm work
    is the generated reductions and pointwise kernels. An NCHW model too: the
    joint graph's channels-last plan makes its activations channels-last."""
    model = nn.Sequential(nn.Conv2d(16, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda")
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            compiled(x).float().sum().backward()

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert not [n for n in names if "batch_norm" in n.lower()], sorted(set(names))
    assert sum(n.endswith("_partials") and n.startswith("mb_norm_") for n in names) == 2, names


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_relu_gradients_run_inside_the_batch_norm_backward_kernels(mode: str) -> None:
    """Note [A ReLU gradient recomputed by its batch-norm sums]: in two conv
    -> batch norm -> ReLU blocks, the first ReLU's gradient (from the second
    convolution's backward) is computed by the first batch norm's backward
    sums and again by its input-gradient kernel, never stored by a kernel of
    its own; every gradient matches eager's."""
    torch.manual_seed(0)
    eager = nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
    ).cuda().to(memory_format=torch.channels_last)  # fmt: skip
    compiled_module, reference = copy.deepcopy(eager), copy.deepcopy(eager)
    options = {"strict": True, "cuda_graphs": mode == "reduce-overhead"}
    compiled = torch.compile(compiled_module, backend="mybackend", options=options)
    x = torch.randn(4, 8, 16, 16, device="cuda").to(memory_format=torch.channels_last)
    weights = torch.randn(4, 32, 16, 16, device="cuda")

    def step(module: nn.Module, autocast: bool = True) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            (module(x).float() * weights).sum().backward()

    _, records = compiled_records(lambda: step(compiled))
    step(compiled)  # a replay in reduce-overhead mode
    for _ in range(2):
        step(eager)
        step(reference, autocast=False)
    # bf16 gradients of the convolutions: within 3x eager's own error
    # against the fp32 model's.
    params = zip(
        compiled_module.parameters(), eager.parameters(), reference.parameters(), strict=True
    )
    for p_compiled, p_eager, p_reference in params:
        error_ratio_check(p_compiled.grad, lambda p=p_reference: p.grad, p_eager.grad)
    (backward,) = [r for r in records if r.kind == "backward"]
    report = backward.core_report
    ops = [n["op"] for n in report["nodes"]]
    kinds = [(k["kind"], [ops[n] for n in k["nodes"]]) for k in report["kernels"]]
    with_prologue = [
        names for kind, names in kinds if kind == "norm" and "aten::where.self" in names
    ]
    assert with_prologue, kinds
    alone = [
        names for kind, names in kinds if kind == "pointwise" and names[-1:] == ["aten::where.self"]
    ]
    assert len(alone) < 2, kinds  # at most the last ReLU's (its dy may be NCHW)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_running_statistics_of_several_layers_update_through_multi_tensor_kernels(
    mode: str,
) -> None:
    """Two conv -> batch norm -> ReLU blocks under autocast: the running
    statistics' copies and counter increments run as _foreach_copy_ and
    _foreach_add_ (Note [Batched input mutations]), inside the CUDA graph in
    reduce-overhead mode, and every buffer matches eager's after four steps."""
    torch.manual_seed(0)
    eager = nn.Sequential(
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16, momentum=0.3), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16, momentum=0.3), nn.ReLU(),
    ).cuda()  # fmt: skip
    compiled_module = copy.deepcopy(eager)
    options = {"strict": True, "cuda_graphs": mode == "reduce-overhead"}
    compiled = torch.compile(compiled_module, backend="mybackend", options=options)

    def step(module: nn.Module, x: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            module(x).float().sum().backward()

    for i in range(4):
        x = torch.randn(4, 8, 12, 12, device="cuda") + i
        step(eager, x)
        if i < 3:
            step(compiled, x)
            continue
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step(compiled, x)
            torch.cuda.synchronize()
        buffers = zip(eager.named_buffers(), compiled_module.buffers(), strict=True)
        for (name, b_eager), b_compiled in buffers:
            torch.testing.assert_close(b_compiled, b_eager, rtol=1e-3, atol=1e-3, msg=name)
    assert int(compiled_module[1].num_batches_tracked) == 4
    if mode == "default":  # kernels replayed in a CUDA graph need not be listed
        names = [e.name for e in prof.events()]
        assert sum("multi_tensor_apply" in n for n in names) >= 2, sorted(set(names))
