"""GPU-marked parity tests: the small models on CUDA, in bf16 and fp32, and
the executor on CUDA streams."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from tests.models.models import MLP, ConvBN, TransformerBlock
from tests.testing import compiled_records, nodes_run_in_partitions

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("make_model", [MLP, ConvBN, TransformerBlock])
def test_training_parity_on_cuda(make_model: type[torch.nn.Module]) -> None:
    eager = make_model().cuda()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="mybackend", options={"strict": True})
    shape = {MLP: (8, 32), ConvBN: (4, 3, 16, 16), TransformerBlock: (2, 10, 32)}[make_model]
    x = torch.randn(*shape, device="cuda")
    eager(x).square().mean().backward()
    _, records = compiled_records(lambda: compiled(x).square().mean().backward())
    for got, want in zip(compiled_model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-4)
    assert nodes_run_in_partitions(records) > 0


def test_bf16_inference_on_cuda() -> None:
    model = TransformerBlock().cuda().to(torch.bfloat16).eval()
    x = torch.randn(4, 16, 32, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)


def test_runs_on_a_non_default_stream() -> None:
    model = MLP().cuda()
    compiled = torch.compile(model, backend="mybackend", options={"strict": True})
    x = torch.randn(16, 32, device="cuda")
    expected = model(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = compiled(x)
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_cuda_extension_was_built_with_cuda() -> None:
    import mybackend

    assert mybackend.cuda_enabled()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])  # as options: not both
def test_channels_last_planned_cnn_inference(dtype: torch.dtype, mode: str) -> None:
    """Note [Channels-last planning] on the GPU: generated kernels and cuDNN see
    channels-last strides; callers still get eager's strides."""
    from tests.unit.test_passes_layout import ConvBlock

    model = ConvBlock().cuda().to(dtype).eval()
    x = torch.randn(4, 3, 20, 18, device="cuda", dtype=dtype)
    options = {"strict": True, "cuda_graphs": mode == "reduce-overhead"}
    compiled = torch.compile(model, backend="mybackend", options=options)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    # fp32 convolutions in TF32 differ by algorithm (NCHW vs NHWC): compare exact math.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        _run_channels_last_cnn(model, x, compiled, tol)


def _run_channels_last_cnn(model: Any, x: torch.Tensor, compiled: Any, tol: Any) -> None:
    with torch.no_grad():
        want = model(x)
        for _ in range(3):  # capture, then replays
            got = compiled(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tol)
        assert g.stride() == w.stride()
