"""``python -m benchmarks``: measure models x scenarios x backends, write the report.

Writes results.json, results.md and PNG charts to ``--out`` and prints the
tables last. Every backend of a row is measured in this process; the warm-cache
compile time is measured by running this CLI again as a subprocess with
``--first-call-only``. See benchmarks/README.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Compiler caches that the first call must find cold and the fresh process warm.
CACHE_ENV = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "MYBACKEND_CACHE_DIR": "mybackend",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; list options take comma-separated values."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--models",
        help="comma list of model names, 'zoo', 'reference' or zoo families "
        "(default: the five reference models of benchmarks/models.py)",
    )
    p.add_argument("--zoo", action="store_true", help="every model of the zoo (benchmarks/zoo/)")
    p.add_argument(
        "--family",
        help="comma list of zoo families: cnn, vision_transformer, encoder, decoder, "
        "encoder_decoder, other",
    )
    p.add_argument(
        "--backends",
        help="comma list of names from benchmarks/backends.py or "
        "'module:attr' (default: all on a GPU; eager,aot-eager,mybackend on a CPU)",
    )
    p.add_argument("--scenarios", default="inference,training", help="inference,training")
    p.add_argument("--batch", help="comma list of batch sizes overriding every scenario's own")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny models on the CPU in fp32, short timing (the CI smoke run)",
    )
    p.add_argument(
        "--out", type=Path, default=Path("bench_out"), help="output folder (default bench_out)"
    )
    _add_measurement_args(p)
    return p.parse_args(argv)


def _add_measurement_args(p: argparse.ArgumentParser) -> None:
    """How to measure: device, precision, repeats, caches, isolation."""
    p.add_argument("--repeats", type=int, help="timed repeats per backend (default 10; quick 5)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", help="run precision (default bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--tiny", action="store_true", help="tiny model variants")
    p.add_argument(
        "--device-ceilings",
        action="store_true",
        help="also measure copy TB/s and bf16 matmul TFLOP/s (GPU only)",
    )
    p.add_argument(
        "--warm-compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure the first call in a fresh process (default: on; off in --quick)",
    )
    p.add_argument(
        "--warm-compile-backends",
        help="comma list: measure the fresh-process first call only for these backends "
        "(default: every compiled backend of the run)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        help="compiler cache folder (default: a fresh temporary one, so first calls compile cold)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's; "
        "quick: 1, steady when other processes share the cores)",
    )
    p.add_argument(
        "--isolate",
        action="store_true",
        help="run each row in a child process: a backend that crashes the process "
        "is marked 'crashed' and the row is measured again without it",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a backend errors, crashes or fails the "
        "accuracy check ('unavailable' backends do not count)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--first-call-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--row-json", type=Path, help=argparse.SUPPRESS)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def model_names(args: argparse.Namespace) -> list[str]:
    """The models of a run: --models, --zoo and --family together (each model
    once, in that order); the five reference models when none is given."""
    from benchmarks.models import FAMILIES, select_models

    families = _split(args.family) or []
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown family {unknown}; choose from {', '.join(FAMILIES)}")
    return select_models((_split(args.models) or []) + (["zoo"] if args.zoo else []) + families)


@contextmanager
def compiler_caches(cache_dir: Path | None) -> Iterator[Path]:
    """Points every compiler cache into one folder for the run (and its subprocesses)."""
    root = cache_dir or Path(tempfile.mkdtemp(prefix="benchmarks-cache-"))
    saved = {k: os.environ.get(k) for k in CACHE_ENV}
    for key, sub in CACHE_ENV.items():
        os.environ[key] = str(root / sub)
    try:
        yield root
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cache_dir is None:
            shutil.rmtree(root, ignore_errors=True)


class _PlainProgress:
    """The fallback when tqdm is missing: one line per finished measurement."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def set_description(self, text: str) -> None:
        self.text = text

    def update(self, n: int = 1) -> None:
        self.done += n
        print(f"[{self.done}/{self.total}] {getattr(self, 'text', '')}", file=sys.stderr)

    def close(self) -> None:
        pass


def progress(total: int, enabled: bool) -> Any:
    """A tqdm bar on stderr, or the plain fallback."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(total)
    return tqdm(total=total, disable=not enabled, file=sys.stderr, unit="run")


def _settings(args: argparse.Namespace) -> tuple[str, str, bool, Any]:
    """Device, dtype, tiny and timing Settings implied by the arguments; sets threads."""
    import torch

    from benchmarks.runner import Settings, default_device

    threads = args.threads or (1 if args.quick else None)
    if threads:
        torch.set_num_threads(threads)
    device = "cpu" if args.quick else (args.device or default_device())
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    tiny = bool(args.quick or args.tiny)
    warm = args.warm_compile if args.warm_compile is not None else not args.quick
    quick = Settings(
        repeats=5, warmup=2, target_ms=20.0, warm_compile=warm, quick=True, threads=threads
    )
    full = Settings(warm_compile=warm, threads=threads)
    settings = quick if args.quick else full
    if args.warm_compile_backends:
        names = frozenset(n.strip() for n in args.warm_compile_backends.split(",") if n.strip())
        settings = dataclasses.replace(settings, warm_compile_backends=names)
    if args.repeats:
        settings = dataclasses.replace(settings, repeats=args.repeats)
    return device, dtype, tiny, settings


def first_call_only(args: argparse.Namespace) -> int:
    """The subprocess half of the warm-cache measurement: print the first-call time."""
    from benchmarks.backends import resolve
    from benchmarks.runner import FIRST_CALL_MARKER
    from benchmarks.runner import first_call_only as measure
    from benchmarks.scenarios import Workload

    device, dtype, tiny, _ = _settings(args)
    batch = int(args.batch)
    workload = Workload(args.models, args.scenarios, batch, device, dtype, tiny)
    seconds = measure(workload, resolve(args.backends))
    print(FIRST_CALL_MARKER + json.dumps({"first_call_s": seconds}), flush=True)
    return 0


def _passthrough(args: argparse.Namespace, settings: Any, cache_root: Path) -> list[str]:
    """The options an --isolate child needs to measure exactly as this process would."""
    extra = ["--quick"] if args.quick else []
    extra += ["--cache-dir", str(cache_root), "--repeats", str(settings.repeats)]
    extra.append("--warm-compile" if settings.warm_compile else "--no-warm-compile")
    if settings.warm_compile_backends is not None:
        extra += ["--warm-compile-backends", ",".join(sorted(settings.warm_compile_backends))]
    return extra + (["--threads", str(settings.threads)] if settings.threads else [])


def _row_measurer(
    args: argparse.Namespace, settings: Any, names: list[str], cache_root: Path
) -> Callable[[Any, Callable[[str], None]], list[Any]]:
    """In-process ``measure_row``, or its ``--isolate`` child-process twin."""
    from benchmarks.backends import resolve
    from benchmarks.isolate import measure_row_isolated
    from benchmarks.runner import measure_row

    backends = [resolve(n) for n in names]
    if not args.isolate:
        return lambda w, done: measure_row(w, backends, settings, on_done=done)
    passthrough = _passthrough(args, settings, cache_root)
    specs = [b.spec or b.name for b in backends]
    return lambda w, done: measure_row_isolated(
        w, specs, [b.name for b in backends], passthrough, on_done=done
    )


def _ceilings(device: str) -> dict[str, float] | None:
    import torch

    from benchmarks.micro.roofline import measure_ceilings

    ceilings = measure_ceilings(torch.device(device))
    if ceilings is None:
        print("device ceilings skipped: no CUDA device", file=sys.stderr)
    return ceilings.to_dict() if ceilings else None


def run_benchmarks(args: argparse.Namespace, argv: list[str], cache_root: Path) -> int:
    """The main run: every row, every backend, then the report."""
    from benchmarks.backends import default_names
    from benchmarks.report import terminal_text, write_outputs
    from benchmarks.results import Run, collect_meta
    from benchmarks.scenarios import workloads

    device, dtype, tiny, settings = _settings(args)
    names = _split(args.backends) or list(default_names(device.startswith("cuda")))
    batches = [int(b) for b in _split(args.batch) or []] or None
    rows = workloads(
        model_names(args),
        _split(args.scenarios) or [],
        batches,
        device,
        dtype,
        tiny,
    )
    measure = _row_measurer(args, settings, names, cache_root)
    run = Run(meta={**collect_meta(device, dtype, argv), "quick": bool(args.quick)})
    if args.device_ceilings:
        run.ceilings = _ceilings(device)
    bar = progress(len(rows) * len(names), not args.no_progress)
    for i, w in enumerate(rows):
        bar.set_description(f"{w.model} {w.scenario} b{w.batch}")
        start = time.perf_counter()
        run.results += measure(w, _done_reporter(bar, bool(args.row_json)))
        if args.no_progress and not args.row_json:
            print(
                f"[{i + 1}/{len(rows)}] {w.model} {w.scenario} b{w.batch}: "
                f"{time.perf_counter() - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if not args.row_json:
            args.out.mkdir(parents=True, exist_ok=True)
            run.save(args.out / "results.json")  # partial results survive a crash
    bar.close()
    if args.row_json:
        run.save(args.row_json)
        return 0
    for note in write_outputs(run, args.out):
        print(note)
    print(f"wrote {args.out}/results.json, results.md and charts\n")
    print(terminal_text(run))
    return _exit_status(run, args.strict)


def _exit_status(run: Any, strict: bool) -> int:
    """0, or 1 under --strict when any backend errored, crashed or was inaccurate."""
    bad = [r for r in run.results if r.status in ("error", "crashed") or r.accurate is False]
    for r in bad:
        print(
            f"FAILED {r.model} {r.scenario} b{r.batch} {r.backend}: "
            f"{r.status} {r.error or r.accuracy_note}",
            file=sys.stderr,
        )
    return 1 if strict and bad else 0


def _done_reporter(bar: Any, child: bool) -> Callable[[str], None]:
    """Advances the bar; in an --isolate child also tells the parent on stdout."""
    from benchmarks.isolate import DONE_MARKER

    def done(name: str) -> None:
        bar.update(1)
        if child:
            print(DONE_MARKER + name, flush=True)

    return done


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``."""
    faulthandler.enable()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.first_call_only:
        return first_call_only(args)
    with compiler_caches(args.cache_dir) as cache_root:
        return run_benchmarks(args, argv, cache_root)
