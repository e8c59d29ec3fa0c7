"""The matmul engine's micro-benchmark: a Transformer MLP up-projection.

8192 tokens x 768 -> 3072, bf16, bias + GELU(tanh), three ways:

* eager: ``F.gelu(F.linear(x, w, b), approximate="tanh")`` (two kernels);
* mybackend: the same function through ``torch.compile(backend="mybackend")``
  (one cuBLASLt call with the GELU_BIAS epilogue when the engine works);
* mybackend-max-autotune: the same with mode ``max-autotune-no-cudagraphs``
  (the algorithm picked by timing; Note [Timed algorithm choice]);
* inductor-max-autotune: Inductor's own best (Triton templates and cuBLAS);
* cublaslt: the bare call through the engine's own wrapper
  (``_C._cublaslt_linear``), the floor of what the engine can reach.

Each is reported in ms, TFLOP/s (2·M·K·N) and as a fraction of the measured
bf16 matmul ceiling (roofline.measure_matmul_tflops).

    python -m benchmarks.micro.matmul [--repeats 20] [--out folder]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.common import rel_error, reset_dynamo, time_calls
from benchmarks.micro.cases import K, M, N, _linear_inputs
from benchmarks.micro.roofline import measure_matmul_tflops
from benchmarks.report import fmt, markdown_table

FLOPS = 2 * M * K * N


def linear_gelu_tanh(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b), approximate="tanh")


@dataclasses.dataclass
class MatmulResult:
    variant: str
    median_ms: float | None = None
    tflops: float | None = None
    of_ceiling: float | None = None
    rel_error: float | None = None
    status: str = "ok"


def _variants() -> dict[str, Callable[..., torch.Tensor]]:
    from mybackend import _C

    compiled = torch.compile(linear_gelu_tanh, backend="mybackend", options={"strict": True})
    tuned = torch.compile(linear_gelu_tanh, backend="mybackend", mode="max-autotune-no-cudagraphs")
    inductor = torch.compile(linear_gelu_tanh, mode="max-autotune-no-cudagraphs")
    return {
        "eager": linear_gelu_tanh,
        "mybackend": compiled,
        "mybackend-max-autotune": tuned,
        "inductor-max-autotune": inductor,
        "cublaslt": lambda x, w, b: _C._cublaslt_linear(x, w, b, "gelu_tanh_bias"),
    }


def run(repeats: int = 20) -> tuple[float, list[MatmulResult]]:
    """The bf16 ceiling in TFLOP/s and one result per variant."""
    device = torch.device("cuda")
    ceiling = measure_matmul_tflops(device)
    reset_dynamo()
    inputs = _linear_inputs(M, K, N)(device, torch.Generator().manual_seed(0))
    expected = linear_gelu_tanh(*(t.float() for t in inputs))
    results = []
    with torch.no_grad():
        for name, fn in _variants().items():
            result = MatmulResult(name)
            try:
                result.rel_error = rel_error(fn(*inputs).float(), expected)
                ms = time_calls(lambda fn=fn: fn(*inputs), device, repeats, 5, 50).median_ms
            except Exception as exc:  # one failing variant must not end the run
                result.status = f"error: {type(exc).__name__}: {exc}"[:200]
                results.append(result)
                continue
            result.median_ms = ms
            result.tflops = FLOPS / (ms * 1e-3) / 1e12
            result.of_ceiling = result.tflops / ceiling
            results.append(result)
    return ceiling, results


def table(ceiling: float, results: list[MatmulResult]) -> str:
    header = ("variant", "ms", "TFLOP/s", "of bf16 ceiling", "rel err", "status")
    rows = [
        [
            r.variant,
            fmt(r.median_ms, 3),
            fmt(r.tflops, 1),
            "-" if r.of_ceiling is None else f"{100 * r.of_ceiling:.0f}%",
            "-" if r.rel_error is None else f"{r.rel_error:.1e}",
            r.status,
        ]
        for r in results
    ]
    title = f"MLP up-projection {M}x{K} -> {N} bf16, bias + GELU(tanh); "
    return title + f"bf16 matmul ceiling {ceiling:.0f} TFLOP/s\n\n" + markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro.matmul", description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="folder for matmul.json/.md")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("matmul micro-benchmark skipped: no CUDA device")
        return 0
    ceiling, results = run(args.repeats)
    text = table(ceiling, results)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        body = {"ceiling_tflops": ceiling, "results": [dataclasses.asdict(r) for r in results]}
        (args.out / "matmul.json").write_text(json.dumps(body, indent=2))
        (args.out / "matmul.md").write_text(text + "\n")
    print(text)
    print(timed_choices_text(_timed_choices()))
    return 0


def _timed_choices() -> list[dict[str, Any]]:
    from mybackend import _C

    return list(_C.cublaslt_timed_choices())


def timed_choices_text(choices: list[dict[str, Any]]) -> str:
    """What each timed cuBLASLt choice of the run compared (Note [Timed
    algorithm choice]): one line per candidate, the kept one marked."""
    lines = []
    for choice in choices:
        lines.append(f"timed choice for {choice['signature']}:")
        for k, (config, ms) in enumerate(choice["candidates"]):
            mark = "*" if k == choice["chosen"] else " "
            time_text = f"{ms:.4f} ms" if ms >= 0 else "no launch"
            lines.append(f"  {mark} {time_text}  {config}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
