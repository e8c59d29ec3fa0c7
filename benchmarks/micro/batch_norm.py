"""Training batch norm's generated reductions per ResNet-50 layer shape.

    python -m benchmarks.micro.batch_norm [--batch 64]

For each channels-last bf16 activation of ResNet-50's batch norms, the GPU
time (kernels only, from the profiler) of a copy of it (the bandwidth
reference), of mybackend's statistics kernel (`batch_norm_stats`), of ATen's
statistics kernel (`torch.batch_norm_stats`) and of mybackend's backward
sums (`batch_norm_backward_reduce`, reading two activations). The knobs
MYBACKEND_BN_* (docs/performance.md) change the generated kernels' launch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import mybackend.ops.batch_norm  # noqa: F401  (registers the ops)
from benchmarks.report import markdown_table
from mybackend import _C
from mybackend.lowering import lower

# (channels, height = width) of ResNet-50's batch-norm inputs.
LAYERS = [(64, 112), (64, 56), (256, 56), (128, 28), (512, 28), (256, 14), (1024, 14), (2048, 7)]


def _generated(fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    lowered = lower(make_fx(fn, tracing_mode="fake")(*inputs), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def gpu_us(fn: Callable[[], Any], calls: int = 20) -> float:
    """Kernel time per call, in microseconds."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages()) / calls


def layer_row(batch: int, channels: int, size: int) -> list[str]:
    """One table row: the four timings for one activation shape."""
    shape = (batch, channels, size, size)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    grad = torch.randn_like(x)
    running = [torch.zeros(channels, device="cuda"), torch.ones(channels, device="cuda")]
    saved = [torch.zeros(channels, device="cuda"), torch.ones(channels, device="cuda")]
    stats = _generated(
        lambda x, m, v: torch.ops.mybackend.batch_norm_stats(x, m, v, 0.1, 1e-5), x, *running
    )
    sums = _generated(torch.ops.mybackend.batch_norm_backward_reduce, grad, x.clone(), *saved)
    megabytes = x.numel() * x.element_size() / 1e6
    return [
        "x".join(map(str, shape)),
        f"{megabytes:.0f}",
        f"{gpu_us(lambda: x.clone()):.1f}",
        f"{gpu_us(lambda: stats.run([x, *running])):.1f}",
        f"{gpu_us(lambda: torch.batch_norm_stats(x, 1e-5)):.1f}",
        f"{gpu_us(lambda: sums.run([grad, x, *saved])):.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    rows = [layer_row(args.batch, channels, size) for channels, size in LAYERS]
    header = ("activation", "MB", "copy us", "statistics us", "ATen statistics us", "backward us")
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
