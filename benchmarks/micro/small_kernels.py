"""Small elementwise kernels under CUDA graphs: GPU time per kernel.

At batch 1 a CNN's batch-norm and activation kernels move a few hundred KB
each, so their time is latency (launch ramp, dependent loads, instruction
chains), not bandwidth. Each graph here holds ``BRANCHES`` independent
branches, one kernel each, run under CUDA graphs; the profiler's GPU time
per kernel of mybackend (each launch-tuning variant asked for) and of
Inductor reduce-overhead, in one process. The last shape is bandwidth-bound,
as a check that a latency fix costs nothing there.

    python -m benchmarks.micro.small_kernels                     # every case
    python -m benchmarks.micro.small_kernels bn_relu --variant pw_fast_divisors=0

GPU only. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

BRANCHES = 8
EPS = 1e-3
SHAPES: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 112, 112),
    (1, 72, 56, 56),
    (1, 240, 14, 14),
    (1, 960, 7, 7),
    (32, 256, 56, 56),
)
Branch = Callable[..., torch.Tensor]


def _bn(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
    return F.batch_norm(x, m, v, w, b, False, 0.0, EPS)


def _hardswish_by_multiplying(y: torch.Tensor) -> torch.Tensor:
    return y * (y + 3).clamp(0, 6) * (1.0 / 6)


# Each takes (x, mean, var, weight, bias); x is channels-last.
CASES: dict[str, Branch] = {
    "scale": lambda x, m, v, w, b: x * 2 + 1,
    "bn_relu": lambda x, m, v, w, b: F.relu(_bn(x, m, v, w, b)),
    "bn_hardswish": lambda x, m, v, w, b: F.hardswish(_bn(x, m, v, w, b)),
    "bn_hardswish_mul": lambda x, m, v, w, b: _hardswish_by_multiplying(_bn(x, m, v, w, b)),
}


def graph(branch: Branch) -> Callable[..., list[torch.Tensor]]:
    """BRANCHES independent applications of ``branch``, 5 arguments each."""

    def run(*args: torch.Tensor) -> list[torch.Tensor]:
        return [branch(*args[5 * i : 5 * i + 5]) for i in range(BRANCHES)]

    return run


def make_inputs(
    shape: Sequence[int], device: torch.device, dtype: torch.dtype, gen: torch.Generator
) -> list[torch.Tensor]:
    """Arguments of ``graph``: per branch a channels-last activation and
    per-channel statistics and affine parameters (variances positive)."""
    channels = shape[1]
    out: list[torch.Tensor] = []
    for _ in range(BRANCHES):
        x = torch.randn(tuple(shape), generator=gen).to(device, dtype)
        out.append(x.contiguous(memory_format=torch.channels_last))
        out.append(torch.randn(channels, generator=gen).to(device, dtype))
        out.append((torch.rand(channels, generator=gen) + 0.5).to(device, dtype))
        out.append(torch.randn(channels, generator=gen).to(device, dtype))
        out.append(torch.randn(channels, generator=gen).to(device, dtype))
    return out


def parse_variant(text: str) -> dict[str, int]:
    """``"pw_block=64,pw_fast_divisors=0"`` -> launch tuning; ``""`` -> defaults."""
    tuning: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"a variant is knob=integer[,knob=integer...], got {item!r}")
        tuning[name.strip()] = int(value)
    return tuning


def _compilers(variants: Sequence[str]) -> list[tuple[str, Callable[[Any], Any]]]:
    out: list[tuple[str, Callable[[Any], Any]]] = [
        ("inductor-RO", lambda fn: torch.compile(fn, mode="reduce-overhead"))
    ]
    for variant in ("", *variants):
        options: dict[str, Any] = {"cuda_graphs": True, "eager_floor": False}
        if variant:
            options["launch_tuning"] = parse_variant(variant)
        name = f"mybackend {variant}".strip()
        out.append((name, lambda fn, o=options: torch.compile(fn, backend="mybackend", options=o)))
    return out


def _gpu_us_per_kernel(fn: Callable[..., Any], args: Sequence[torch.Tensor]) -> tuple[float, float]:
    """Mean GPU time of the generated kernels per launch, and launches per call."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    steps = 20
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn(*args)
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    for event in prof.events():
        generated = event.name.startswith(("mb_", "triton"))
        if event.device_type == DeviceType.CUDA and generated:
            totals[event.name] += event.device_time
            counts[event.name] += 1
    launches = sum(counts.values())
    return sum(totals.values()) / max(launches, 1), launches / steps


def run(cases: Sequence[str], variants: Sequence[str]) -> str:
    """The table, one row per (case, shape, backend)."""
    if not torch.cuda.is_available():
        raise RuntimeError("small-kernel micro-benchmarks need a CUDA GPU")
    rows = [
        f"# {torch.cuda.get_device_name()}, {BRANCHES} kernels a graph, bf16",
        "| case | shape | backend | us per kernel | kernels per call | max abs err |",
        "|---|---|---|---|---|---|",
    ]
    device = torch.device("cuda")
    for case in cases:
        fn = graph(CASES[case])
        for shape in SHAPES:
            args = make_inputs(shape, device, torch.bfloat16, torch.Generator().manual_seed(0))
            expected = [t.float() for t in fn(*args)]
            for name, compile_fn in _compilers(variants):
                torch._dynamo.reset()
                shape_text = "x".join(map(str, shape))
                try:
                    compiled = compile_fn(fn)
                    got = compiled(*args)
                    err = max(
                        (g.float() - e).abs().max().item()
                        for g, e in zip(got, expected, strict=True)
                    )
                    us, launches = _gpu_us_per_kernel(compiled, args)
                except Exception as exc:  # a failing backend is a row, not the end of the run
                    rows.append(f"| {case} | {shape_text} | {name} | error: {exc!r:.150} | | |")
                    continue
                rows.append(
                    f"| {case} | {shape_text} | {name} | {us:.2f} | {launches:.0f} | {err:.3g} |"
                )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"any of {', '.join(CASES)} (default: all)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="a mybackend launch-tuning variant, knob=value[,knob=value] (repeatable)",
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    for variant in args.variant:
        parse_variant(variant)  # bad text fails before any compile
    print(run(args.cases or list(CASES), args.variant))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
