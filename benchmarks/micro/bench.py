"""Running the micro-benchmarks: time each case per backend against its floor."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from benchmarks.backends import Backend, resolve
from benchmarks.common import free_memory, rel_error, reset_dynamo, time_calls
from benchmarks.micro.cases import CASES, MicroCase
from benchmarks.micro.roofline import Ceilings, floor, measure_ceilings
from benchmarks.report import fmt, markdown_table

DEFAULT_BACKENDS = ("eager", "inductor", "mybackend", "mybackend-no-generated")
HEADER = (
    "case",
    "backend",
    "ms",
    "floor ms",
    "bound",
    "of roofline",
    "TB/s",
    "TFLOP/s",
    "rel err",
    "status",
)


@dataclasses.dataclass
class MicroResult:
    """One case on one backend; times in ms, ``fraction`` = floor / measured."""

    case: str
    backend: str
    status: str = "ok"
    error: str = ""
    median_ms: float | None = None
    floor_ms: float | None = None
    bound: str | None = None
    fraction: float | None = None
    tbps: float | None = None
    tflops: float | None = None
    rel_error: float | None = None


def run_case(
    case: MicroCase, backend: Backend, ceilings: Ceilings, device: torch.device, repeats: int = 20
) -> MicroResult:
    """Times ``case`` compiled with ``backend``; checks it against an fp32 eager run."""
    result = MicroResult(case.name, backend.name)
    reason = backend.unavailable_reason()
    if reason:
        result.status, result.error = "unavailable", reason
        return result
    reset_dynamo()
    free_memory(device)
    try:
        inputs = case.make_inputs(device, torch.Generator().manual_seed(0))
        fn = backend.compile(case.fn)
        expected = case.reference(inputs)
        result.rel_error = rel_error(fn(*inputs).float(), expected)
        del expected
        ms = time_calls(
            lambda: fn(*inputs), device, repeats=repeats, warmup=5, target_ms=50
        ).median_ms
    except Exception as exc:  # a failing backend must not end the run
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"[:300]
        return result
    bound = floor(case.bytes_moved, case.flops, ceilings)
    result.median_ms, result.floor_ms, result.bound = ms, bound.ms, bound.bound
    result.fraction = bound.ms / ms
    result.tbps = case.bytes_moved / (ms * 1e-3) / 1e12
    result.tflops = case.flops / (ms * 1e-3) / 1e12
    return result


def run_all(
    backends: list[str],
    device: torch.device,
    ceilings: Ceilings,
    cases: list[str] | None = None,
    repeats: int = 20,
) -> list[MicroResult]:
    """Every selected case on every selected backend."""
    chosen = [CASES[name] for name in (cases or list(CASES))]
    return [
        run_case(case, resolve(b), ceilings, device, repeats) for case in chosen for b in backends
    ]


def micro_table(results: list[MicroResult]) -> str:
    """The micro results as a markdown table."""
    rows = [
        [
            r.case,
            r.backend,
            fmt(r.median_ms, 3),
            fmt(r.floor_ms, 3),
            r.bound or "-",
            "-" if r.fraction is None else f"{100 * r.fraction:.0f}%",
            fmt(r.tbps),
            fmt(r.tflops, 1),
            "-" if r.rel_error is None else f"{r.rel_error:.1e}",
            r.status if r.status == "ok" else f"{r.status}: {r.error[:60]}",
        ]
        for r in results
    ]
    return markdown_table(HEADER, rows)


def main(argv: list[str] | None = None) -> int:
    """Runs the micro-benchmarks on the GPU; prints a table, writes micro.json/.md."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=main.__doc__)
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="folder for micro.json/.md")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("micro-benchmarks skipped: no CUDA device (the roofline is GPU-only)")
        return 0
    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    assert ceilings is not None
    results = run_all(
        args.backends.split(","), device, ceilings, args.cases.split(","), args.repeats
    )
    text = (
        f"Ceilings: copy {ceilings.copy_tbps:.2f} TB/s, bf16 matmul "
        f"{ceilings.matmul_tflops:.0f} TFLOP/s\n\n" + micro_table(results)
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        body = {"ceilings": ceilings.to_dict(), "results": [dataclasses.asdict(r) for r in results]}
        (args.out / "micro.json").write_text(json.dumps(body, indent=2))
        (args.out / "micro.md").write_text(text + "\n")
    print(text)
    return 0
