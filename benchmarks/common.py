"""Shared helpers: timing, accuracy, compile counters and device memory.

Timing follows /work/.library/device/METHOD.md: warm up first, then time
``repeats`` blocks of ``iters`` calls each and report the median block's time
per call with its spread. On a GPU each block is bracketed by CUDA events (and
synchronised before the clock is read); on a CPU by ``time.perf_counter``.

Accuracy follows PyTorch's own benchmark harness (``torch._dynamo.utils.same``):
a result passes when it is allclose to the eager result at the run's precision
within ``tol``, or when its RMSE against a higher-precision reference is no more
than a small multiple of eager's own RMSE. We add the cosine similarity against
that reference (the harness's other criterion, threshold 0.99, lowered to
eager's own cosine minus 0.01 where eager itself is further off) and the
relative error ``||out - ref|| / ||ref||``, both over all outputs (or the loss
and all gradients) concatenated into one vector.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

COSINE_THRESHOLD = 0.99
COSINE_SLACK = 0.01  # how far under eager's own cosine a result may fall


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call time of a function: median over repeats and its spread, in ms."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float
    iters: int
    repeats: int


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """The verdict on one backend's outputs against the references."""

    passed: bool
    cosine: float
    rel_error: float
    tol: float
    reason: str = ""


def synchronize(device: torch.device) -> None:
    """Waits for all queued work on ``device`` (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall-clock seconds of one call, device work included."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def time_block(fn: Callable[[], Any], device: torch.device, iters: int) -> float:
    """Milliseconds per call over one block of ``iters`` back-to-back calls."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / iters
    begin = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - begin) * 1e3 / iters


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of ``values``."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def time_calls(
    fn: Callable[[], Any],
    device: torch.device,
    repeats: int = 10,
    warmup: int = 3,
    target_ms: float = 100.0,
    max_iters: int = 200,
) -> Timing:
    """Times ``fn`` after ``warmup`` calls: ``repeats`` blocks of ~``target_ms`` each."""
    for _ in range(warmup):
        fn()
    one = max(time_once(fn, device) * 1e3, 1e-3)
    iters = max(1, min(max_iters, round(target_ms / one)))
    samples = [time_block(fn, device, iters) for _ in range(max(1, repeats))]
    return Timing(
        median_ms=statistics.median(samples),
        p25_ms=quantile(samples, 0.25),
        p75_ms=quantile(samples, 0.75),
        min_ms=min(samples),
        max_ms=max(samples),
        iters=iters,
        repeats=len(samples),
    )


def tensors_of(value: Any) -> list[torch.Tensor]:
    """All tensors in a (nested) output, in a stable order."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def clone_tensors(value: Any) -> list[torch.Tensor]:
    """Detached copies of every tensor in ``value`` (outputs a CUDA graph may overwrite)."""
    return [t.detach().clone() for t in tensors_of(value)]


def cosine(res: torch.Tensor, ref: torch.Tensor) -> float:
    """Cosine similarity of two flattened tensors, in float64; 1.0 when both are ~0."""
    a, b = res.detach().flatten().double(), ref.detach().flatten().double().to(res.device)
    if a.numel() == 0 or torch.allclose(a, b, atol=1e-12, rtol=0.0):
        return 1.0
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0, eps=1e-12))


def rel_error(res: torch.Tensor, ref: torch.Tensor) -> float:
    """``||res - ref|| / ||ref||`` in float64 (the absolute error when ``ref`` is 0)."""
    a, b = res.detach().double(), ref.detach().double().to(res.device)
    denom = float(b.norm())
    diff = float((a - b).norm())
    return diff / denom if denom > 0 else diff


def _concat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """All tensors flattened into one float64 vector."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([t.detach().flatten().double().to(tensors[0].device) for t in tensors])


def check_accuracy(
    result: Sequence[torch.Tensor],
    eager: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor],
    tol: float,
    device: torch.device | None = None,
) -> Accuracy:
    """Judges ``result`` as torch's benchmark harness does (see the module doc).

    ``eager`` is the uncompiled module's output at the run's precision;
    ``reference`` the same computation at higher precision (fp32 for bf16
    runs, fp64 for fp32 runs). All three are moved to ``device`` (default:
    where ``result`` is) for the comparison.
    """
    from torch._dynamo.utils import same

    if len(result) != len(eager) or len(result) != len(reference):
        return Accuracy(False, float("nan"), float("nan"), tol, "output count differs")
    if device is not None:
        result, eager, reference = ([t.to(device) for t in ts] for ts in (result, eager, reference))
    messages: list[str] = []

    def log_error(msg: str, *args: Any) -> None:
        messages.append(msg % args if args else msg)

    ref64 = [
        r.detach().to(device=e.device, dtype=torch.float64)
        for r, e in zip(reference, eager, strict=True)
    ]
    ok = bool(same(list(eager), list(result), fp64_ref=ref64, tol=tol, log_error=log_error))
    # One cosine and one relative error over all outputs together: per tensor,
    # a gradient that is ~0 in the reference would read as noise.
    flat_res, flat_ref = _concat(result), _concat(reference)
    cos, err = cosine(flat_res, flat_ref), rel_error(flat_res, flat_ref)
    # bf16 gradients of a deep net at random init can sit far from fp32 ones in
    # eager too (cancellation in weight gradients): ask no more than eager gets.
    needed = min(COSINE_THRESHOLD, cosine(_concat(eager), flat_ref) - COSINE_SLACK)
    if not cos >= needed:  # also catches NaN
        messages.append(f"cosine similarity {cos:.4f} < {needed:.4f}")
        ok = False
    return Accuracy(ok, cos, err, tol, "; ".join(messages)[:300])


def dynamo_counts() -> dict[str, int]:
    """Graphs compiled, graph breaks and recompiles since the last ``reset_dynamo``."""
    from torch._dynamo.utils import counters, guard_failures

    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "recompiles": int(sum(len(v) for v in guard_failures.values())),
    }


def reset_dynamo() -> None:
    """Forgets every compiled frame and zeroes the counters read by ``dynamo_counts``."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def free_memory(device: torch.device) -> None:
    """Collects garbage and, on a GPU, empties the cache and resets the peak."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mib(device: torch.device) -> float | None:
    """Peak allocated GPU memory since the last ``free_memory``, in MiB; None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean of the positive finite values, None when there are none."""
    good = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not good:
        return None
    return math.exp(sum(math.log(v) for v in good) / len(good))
