"""The roofline: measured device ceilings and the floor they put under a kernel.

Method (/work/.library/device/METHOD.md): count the fewest bytes a computation
must move through device memory (each input read once, each output written
once) and the floating-point operations it must do. Bytes over the measured
copy bandwidth and flops over the measured matmul rate give two times; the
larger is the floor. A measurement is reported as ``floor / measured``, the
fraction of the roofline reached (1.0 = at the ceiling).

The ceilings are measured, not taken from a datasheet: a large device-to-device
copy (bytes read + bytes written) and a bf16 8192^3 matrix product, both on
random data (zeros run faster than real data), timed with CUDA events.
"""

from __future__ import annotations

import dataclasses

import torch

from benchmarks.common import time_calls

COPY_BYTES = 2 * 2**30  # one 2 GiB buffer copied into another: far beyond any L2
MATMUL_N = 8192


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """Measured device ceilings."""

    copy_tbps: float  # TB/s (1e12 bytes/s), counting bytes read + bytes written
    matmul_tflops: float  # TFLOP/s of a bf16 MATMUL_N^3 product

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Floor:
    """The time under which a computation cannot run, and which term sets it."""

    ms: float
    memory_ms: float
    compute_ms: float

    @property
    def bound(self) -> str:
        return "memory" if self.memory_ms >= self.compute_ms else "compute"


def floor(bytes_moved: float, flops: float, ceilings: Ceilings) -> Floor:
    """The roofline floor of moving ``bytes_moved`` and doing ``flops``."""
    memory_ms = bytes_moved / (ceilings.copy_tbps * 1e12) * 1e3
    compute_ms = flops / (ceilings.matmul_tflops * 1e12) * 1e3
    return Floor(max(memory_ms, compute_ms), memory_ms, compute_ms)


def roofline_fraction(
    measured_ms: float, bytes_moved: float, flops: float, ceilings: Ceilings
) -> float:
    """floor / measured: 1.0 means the kernel runs at its roofline."""
    return floor(bytes_moved, flops, ceilings).ms / measured_ms


def measure_copy_tbps(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in TB/s, bytes read plus bytes written."""
    src = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    timing = time_calls(lambda: dst.copy_(src), device, repeats=repeats, warmup=3, target_ms=50)
    return 2 * nbytes / (timing.median_ms * 1e-3) / 1e12


def measure_matmul_tflops(device: torch.device, n: int = MATMUL_N, repeats: int = 10) -> float:
    """bf16 n x n x n matrix product rate in TFLOP/s, on random data."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    timing = time_calls(
        lambda: torch.mm(a, b, out=out), device, repeats=repeats, warmup=3, target_ms=50
    )
    return 2 * n**3 / (timing.median_ms * 1e-3) / 1e12


def measure_ceilings(device: torch.device) -> Ceilings | None:
    """Both ceilings on a CUDA device; None on the CPU (the roofline is GPU-only)."""
    if device.type != "cuda":
        return None
    ceilings = Ceilings(measure_copy_tbps(device), measure_matmul_tflops(device))
    torch.cuda.empty_cache()
    return ceilings
