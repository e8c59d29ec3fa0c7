"""Training under torch.distributed: ms per step of eager, Inductor and
mybackend with DDP and FSDP2, and each backend's losses against eager's.

Run it with torchrun, one process per GPU (issue 33; docs/distributed.md):

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 benchmarks/distributed.py
    torchrun --standalone --nproc-per-node 2 benchmarks/distributed.py --device cpu --tiny

The model is GPT-2 small built from transformers' GPT2Config with random
weights (``--tiny``: 2 layers of width 64), trained with AdamW on random
tokens, each rank its own. Setups (``--setups``):

  single    no wrapper: each rank trains its own model on its own GPU, with no
            collective (the single-GPU speedup that DDP's is held to, measured
            in the same run), bf16 autocast
  ddp       DistributedDataParallel, bf16 autocast
  fsdp2     fully_shard per transformer block and on the root, bf16 autocast
  fsdp2-mp  the same with MixedPrecisionPolicy(bf16 parameters, fp32 reduction)
            and no autocast

Every backend of a setup starts from the same weights and sees the same
tokens, so its losses are eager's up to rounding; the check passes when no
step's loss is further than ``--loss-rtol`` (relative) from eager's. The
backends of a setup are built and warmed up (``--warmup`` steps: the first
compiles) one after the other, then timed in ``--rounds`` interleaved
rounds of ``--steps`` steps, each round in another order (round r starts
at the r-th backend), so that a drift of the machine over the run (the
steps are host-bound: docs/performance.md) falls on every backend alike. A
round's time is the slowest rank's mean over its steps; a backend's time
is the median of its rounds, and the table gives their spread. Rank 0
prints one markdown table last and, with ``--out``, writes results.json
and results.md there. A backend that fails is reported as failed and the
run goes on with the others.

``--fsdp-compile blocks`` compiles each transformer block on its own and
the head with the loss (as torchtitan compiles its blocks and its loss)
instead of the whole model, whose forward dynamo cannot trace through
FSDP2's hooks (docs/distributed.md). ``--profile-steps N`` profiles N more
steps of each run (torch.profiler) and writes rank 0's summary to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (torchrun benchmarks/distributed.py):
    # the repository root in place of benchmarks/, whose profile.py would
    # shadow the standard library's (cProfile imports it).
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from benchmarks.backends import REGISTRY
from benchmarks.models import gpt2_config

SETUPS = ("single", "ddp", "fsdp2", "fsdp2-mp")
DEFAULT_BACKENDS = ("eager", "inductor", "mybackend")
LOSS_WINDOW = 10  # steps a mean loss is taken over (Note [Loss curves, not steps])


@dataclasses.dataclass
class Result:
    """One (setup, backend) run as rank 0 reports it."""

    setup: str
    backend: str
    ms_per_step: float | None = None  # the median round's
    ms_rounds: list[float] = dataclasses.field(default_factory=list)  # the slowest rank's, by round
    losses: list[float] = dataclasses.field(default_factory=list)
    max_loss_rel_diff: float | None = None  # against eager's, over all steps
    max_window_rel_diff: float | None = None  # of the mean losses over LOSS_WINDOW steps
    loss_ok: bool | None = None
    graphs: int = 0  # dynamo graphs (unique_graphs)
    graph_breaks: int = 0
    recompiles: int = 0  # frames this backend's warm-up compiled more than once
    fallbacks: int = 0  # mybackend graphs that ran eagerly
    # mybackend's eager floors per graph (Note [Eager is the floor]): their
    # choices and timings, CUDA graphs only
    # (a rank chooses on its own clock: every rank's, by rank).
    floors: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # Rank 0's CPU ms per timed step by thread (thread_cpu_seconds).
    thread_cpu_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    error: str | None = None


class LossModel(nn.Module):
    """GPT-2 with the next-token cross entropy. The output layer and the loss
    are one method, ``head_loss``, so that they are one compiled graph
    (mybackend's fused cross entropy, the padded output layer) however the
    model is compiled: under FSDP2, calling the transformer (sharded blocks)
    is a graph break, and the head and the loss must not be split by it
    (docs/distributed.md)."""

    def __init__(self, gpt2: nn.Module, vocab: int) -> None:
        super().__init__()
        self.gpt2: Any = gpt2  # GPT2LMHeadModel
        self.vocab = vocab

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.gpt2.transformer(input_ids=tokens).last_hidden_state
        return self.head_loss(hidden, targets)

    def head_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """GPT2LMHeadModel's logits (all positions) and the loss."""
        logits = self.gpt2.lm_head(hidden)
        return F.cross_entropy(logits.float().view(-1, self.vocab), targets.view(-1))


def build_model(tiny: bool) -> LossModel:
    """GPT-2 small (tiny: 2 layers, width 64, 1000 words), random weights,
    no dropout (the loss check needs the same step from every backend)."""
    from transformers import GPT2LMHeadModel

    config = gpt2_config(tiny)
    return LossModel(GPT2LMHeadModel(config), config.vocab_size)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when available (NCCL), else cpu (gloo)")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="the small GPT-2 (CPU smoke runs)")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma list of {SETUPS}")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                        help="comma list of benchmarks/backends.py names")  # fmt: skip
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (tiny: 32)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before timing")
    parser.add_argument("--steps", type=int, default=20, help="timed steps a round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved timing rounds of --steps steps per backend")  # fmt: skip
    parser.add_argument("--loss-rtol", type=float, default=2e-2,
                        help="largest relative difference of a mean loss over"
                             f" {LOSS_WINDOW} steps to eager's")  # fmt: skip
    parser.add_argument("--fsdp-compile", choices=("model", "blocks"), default="model")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size")
    parser.add_argument("--ddp-options", type=json.loads, default={},
                        help='more DistributedDataParallel arguments, as JSON, e.g.'
                             ' \'{"gradient_as_bucket_view": true}\'')  # fmt: skip
    parser.add_argument(
        "--cpus-per-rank",
        type=int,
        default=0,
        help="pin each rank (and the threads it starts) to its own N cores",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json/md")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="steps profiled after the timed ones (summary in --out)")  # fmt: skip
    parser.add_argument("--mybackend-options", type=json.loads, default={},
                        help="""mybackend's options, JSON: '{"eager_floor": false}'""")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0 or args.profile_steps < 0:
        parser.error(
            "--steps and --rounds must be 1 or more, --warmup and --profile-steps 0 or more"
        )
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.tiny:
        args.seq = min(args.seq, 32)
    for name in args.backends.split(","):
        if name not in REGISTRY:
            parser.error(f"unknown backend {name!r}; known: {', '.join(REGISTRY)}")
    for setup in args.setups.split(","):
        if setup not in SETUPS:
            parser.error(f"unknown setup {setup!r}; known: {', '.join(SETUPS)}")
    return args


def init_distributed(device: str, cpus_per_rank: int = 0) -> tuple[int, int]:
    """Joins torchrun's process group (NCCL on GPUs, gloo on the CPU); with
    ``cpus_per_rank``, first pins this process to the local rank's own cores
    (threads started later, NCCL's among them, inherit the mask)."""
    # NVLink multicast (NVLS) stays off on the GPU machines (their notes say why).
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cpus_per_rank:
        cores = sorted(os.sched_getaffinity(0))
        mine = cores[local_rank * cpus_per_rank : (local_rank + 1) * cpus_per_rank]
        if len(mine) < cpus_per_rank:
            raise SystemExit(f"--cpus-per-rank {cpus_per_rank}: only {len(cores)} cores here")
        os.sched_setaffinity(0, mine)
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo", timeout=datetime.timedelta(minutes=20)
    )
    return dist.get_rank(), dist.get_world_size()


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """GPT-2's transformer blocks (the units FSDP2 shards and may compile)."""
    blocks = model.get_submodule("gpt2.transformer.h")
    return list(blocks.children())


def wrap(
    model: LossModel,
    setup: str,
    device: str,
    bucket_cap_mb: float,
    ddp_options: dict[str, Any] | None = None,
) -> nn.Module:
    """DDP, FSDP2 over each transformer block and the root, or (single) the
    model itself."""
    model = model.to(device)
    if setup == "single":
        return model
    if setup == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.cuda.current_device()] if device == "cuda" else None
        return DistributedDataParallel(
            model, device_ids=ids, bucket_cap_mb=bucket_cap_mb, **(ddp_options or {})
        )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if setup == "fsdp2-mp":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in transformer_blocks(model):
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def compile_step(
    model: nn.Module,
    setup: str,
    backend: str,
    fsdp_compile: str,
    mybackend_options: dict[str, Any] | None = None,
) -> Callable[..., torch.Tensor]:
    """The module's forward under the backend (eager: itself); mybackend's
    backends get ``mybackend_options`` on top of their own."""
    kwargs = REGISTRY[backend]
    if kwargs is None:
        return model
    if mybackend_options and kwargs.get("backend") == "mybackend":
        from mybackend.options import mode_preset

        # torch.compile takes a mode or options, not both: the mode as its options.
        options = {**mode_preset(kwargs.get("mode")), **kwargs.get("options", {})}
        kwargs = {"backend": "mybackend", "options": {**options, **mybackend_options}}
    if setup.startswith("fsdp2") and fsdp_compile == "blocks":
        for block in transformer_blocks(model):
            block.compile(**kwargs)
        assert isinstance(model, LossModel)
        # An instance attribute: forward calls the compiled method.
        model.head_loss = torch.compile(model.head_loss, **kwargs)  # type: ignore[method-assign]
        return model
    return torch.compile(model, **kwargs)


def floor_choices(records: list[Any]) -> dict[str, str]:
    """What mybackend's eager floors did (Note [Eager is the floor]), one
    per dynamo graph, named by the first of its graphs compiled. Graphs
    without a floor (CPU graphs, collectives) are left out; so are graphs
    that fell back to eager."""
    floors: dict[str, str] = {}
    seen: set[int] = set()
    for record in records:
        floor = getattr(record, "floor", None)
        if floor is None or record.fallback_reason or id(floor) in seen:
            continue
        seen.add(id(floor))
        floors[record.name] = floor.describe().removeprefix("eager floor: ")
    return floors


def floor_summary(floors: dict[str, str]) -> str:
    """The table's floor column: graphs running compiled / eager / measuring
    on one rank ('-' where no graph has a floor)."""
    count = {"compiled": 0, "eager": 0, "measuring": 0}
    for text in floors.values():
        if text.startswith("measuring"):
            count["measuring"] += 1
        elif text.endswith(("runs eager", "runs eager (cached)")):
            count["eager"] += 1
        elif "runs compiled" in text:
            count["compiled"] += 1
    if not any(count.values()):
        return "-"
    return f"{count['compiled']}/{count['eager']}/{count['measuring']}"


def every_rank(value: Any) -> list[Any]:
    """Each rank's value, by rank (a collective: every rank calls it)."""
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


@contextmanager
def mybackend_fallbacks(backend: str) -> Iterator[list[Any]]:
    """The records of mybackend's graphs compiled in the block (empty list
    for other backends)."""
    if not backend.startswith("mybackend"):
        yield []
        return
    from mybackend.reports import collecting

    with collecting() as records:
        yield records


class Trainer:
    """One backend's model, optimizer and data on this rank, warmed up
    (compiled); its steps go on from where the last call left them."""

    def __init__(self, args: argparse.Namespace, setup: str, backend: str, rank: int) -> None:
        from torch._dynamo import convert_frame
        from torch._dynamo.utils import counters

        self.args = args
        self.result = Result(setup, backend)
        counters.clear()
        frames_before = dict(convert_frame.FRAME_COMPILE_COUNTER)
        torch.manual_seed(0)  # the same weights for every backend and rank
        model = wrap(
            build_model(args.tiny), setup, args.device, args.bucket_cap_mb, args.ddp_options
        )
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.step_fn = compile_step(
            model, setup, backend, args.fsdp_compile, args.mybackend_options
        )
        vocab = 1000 if args.tiny else 50257
        generator = torch.Generator().manual_seed(1234 + rank)
        # The same tokens for every backend: step k trains on batches[k % len].
        self.batches = [
            tuple(
                torch.randint(0, vocab, (args.batch, args.seq), generator=generator).to(args.device)
                for _ in range(2)
            )
            for _ in range(args.warmup + args.steps)
        ]
        self.autocast: Any = nullcontext()
        if setup != "fsdp2-mp":
            self.autocast = torch.autocast(args.device, dtype=torch.bfloat16)
        self.losses: list[torch.Tensor] = []
        self.thread_cpu_ms: dict[str, float] = {}
        with mybackend_fallbacks(backend) as records:
            for _ in range(args.warmup):
                self.step()
            synchronize(args.device)
        result = self.result
        result.graphs = counters["stats"]["unique_graphs"]
        result.graph_breaks = sum(counters["graph_break"].values())
        # Frames this backend compiled more than once (other backends' compiles
        # of the same frames came before and are not counted).
        result.recompiles = sum(
            max(count - frames_before.get(frame, 0) - 1, 0)
            for frame, count in convert_frame.FRAME_COMPILE_COUNTER.items()
        )
        result.fallbacks = sum(1 for record in records if record.fallback_reason)
        # Gathered from every rank once every rank has built its trainer.
        self.floors = floor_choices(records) if backend.startswith("mybackend") else None

    def train_step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.autocast:
            loss = self.step_fn(tokens, targets)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # A copy: a CUDA-graph backend's output is overwritten by its next replay.
        return loss.detach().clone()

    def step(self) -> None:
        self.losses.append(self.train_step(*self.batches[len(self.losses) % len(self.batches)]))

    def timed_round(self) -> float:
        """Ms per step of one round on this rank; adds the round's CPU time
        per step of each thread to ``thread_cpu_ms`` (summed over rounds)."""
        synchronize(self.args.device)
        cpu_before = thread_cpu_seconds()
        start = time.perf_counter()
        for _ in range(self.args.steps):
            self.step()
        synchronize(self.args.device)
        elapsed = time.perf_counter() - start
        for name, seconds in thread_cpu_seconds().items():
            used = (seconds - cpu_before.get(name, 0.0)) * 1e3 / self.args.steps
            self.thread_cpu_ms[name] = self.thread_cpu_ms.get(name, 0.0) + used
        return elapsed * 1e3 / self.args.steps

    def finish(self) -> Result:
        result = self.result
        rounds = max(len(result.ms_rounds), 1)
        result.thread_cpu_ms = {
            name: ms / rounds for name, ms in self.thread_cpu_ms.items() if ms / rounds >= 0.05
        }
        result.ms_per_step = statistics.median(result.ms_rounds)
        result.losses = [float(x) for x in torch.stack(self.losses).float().cpu()]
        return result


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user and system) each live thread of this process has
    used, keyed "name:tid", from /proc (empty where there is none).

    Which threads keep a core busy during a step (the main thread, the
    autograd engine's device thread, NCCL's and c10d's threads) is what a
    host-bound step under DDP needs to be understood by (docs/distributed.md,
    "Where DDP's time goes with a compiled step")."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        # "tid (name) state ppid ...": the name may hold spaces and parentheses.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        used[f"{name}:{task.name}"] = (utime + stime) / ticks
    return used


def round_order(backends: list[str], round_index: int) -> list[str]:
    """The backends in round ``round_index``'s order: each round starts one further."""
    first = round_index % len(backends)
    return backends[first:] + backends[:first]


def run_setup(args: argparse.Namespace, setup: str, rank: int) -> list[Result]:
    """Builds and warms up every backend of the setup, times them in
    interleaved rounds, and returns their results in --backends order."""
    torch._dynamo.reset()
    gc.collect()  # the previous setup's models, graphs and optimizer states
    if args.device == "cuda":
        torch.cuda.empty_cache()
    backends = args.backends.split(",")
    trainers: dict[str, Trainer] = {}
    failed: dict[str, Result] = {}

    def fail(backend: str, trainer: Trainer | None, error: str) -> None:
        failed[backend] = (
            dataclasses.replace(trainer.result, error=error)
            if trainer
            else Result(setup, backend, error=error)
        )
        trainers.pop(backend, None)

    def attempt(backend: str, action: Callable[[], None]) -> bool:
        """Whether ``action`` succeeded on every rank (else the backend failed)."""
        error = on_every_rank(action, f"{setup} {backend}", rank, args.device)
        if error is not None:
            fail(backend, trainers.get(backend), error)
        return error is None

    def build(backend: str) -> None:
        trainers[backend] = Trainer(args, setup, backend, rank)

    round_ms: dict[str, float] = {}

    def time_round(backend: str) -> None:
        round_ms[backend] = trainers[backend].timed_round()

    # The collectives of the benchmark itself come after on_every_rank's
    # agreement, never inside an action that could fail on one rank only.
    for backend in backends:
        if attempt(backend, partial(build, backend)) and trainers[backend].floors is not None:
            trainers[backend].result.floors = every_rank(trainers[backend].floors)
    for round_index in range(args.rounds):
        for backend in round_order(backends, round_index):
            if backend in trainers and attempt(backend, partial(time_round, backend)):
                ms = slowest_rank(round_ms[backend], args.device)
                trainers[backend].result.ms_rounds.append(ms)
    results = []
    for backend in backends:
        if backend in failed:
            results.append(failed[backend])
            continue
        trainer = trainers[backend]
        if args.profile_steps:
            profile_steps(args, f"{setup}-{backend}", rank, trainer.train_step, trainer.batches)
        results.append(trainer.finish())
    return results


def profile_steps(
    args: argparse.Namespace,
    name: str,
    rank: int,
    train_step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batches: list[tuple[torch.Tensor, ...]],
) -> None:
    """Runs --profile-steps more steps under torch.profiler; rank 0 writes
    profile-NAME.txt to --out: ms per step, the device's kernel time per step
    (all streams, summed), and the ops with the most host and device time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    steps = args.profile_steps
    with profile(activities=activities) as prof:
        synchronize(args.device)
        start = time.perf_counter()
        for index in range(steps):
            train_step(*batches[index % len(batches)])
        synchronize(args.device)
        elapsed = time.perf_counter() - start
    if rank != 0 or args.out is None:
        return
    averages = prof.key_averages()
    # Kernels only, as torch's table totals them: a user annotation (a
    # record_function range such as mybackend::matmul) carries the device
    # time of the kernels inside it, which would count them twice.
    device_us = sum(
        event.self_device_time_total
        for event in averages
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation
    )
    lines = [
        f"{name}: {steps} profiled steps, {elapsed * 1e3 / steps:.2f} ms per step under the"
        f" profiler, {device_us / 1e3 / steps:.2f} ms of device kernel time per step",
        "",
        averages.table(sort_by="self_cpu_time_total", row_limit=30),
    ]
    if args.device == "cuda":
        lines.append(averages.table(sort_by="self_device_time_total", row_limit=30))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"profile-{name}.txt").write_text("\n".join(lines) + "\n")


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def on_every_rank(action: Callable[[], None], label: str, rank: int, device: str) -> str | None:
    """Runs ``action`` on this rank and returns None if it succeeded on every
    rank; else this rank's traceback (printed with its rank), or a line
    saying another rank failed. A collective, so that a failure on one rank
    fails the step on all of them: no rank goes on to a collective that the
    others never reach (which had ended a GPU run with a lost traceback)."""
    error = None
    try:
        action()
    except Exception:
        error = traceback.format_exc()
        print(f"[rank {rank}] {label} failed:\n{error}", flush=True)
    if all_ranks_ok(error is None, device):
        return None
    return error or "failed on another rank"


def all_ranks_ok(ok: bool, device: str) -> bool:
    """Whether ``ok`` holds on every rank (a collective: every rank calls it)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def slowest_rank(value: float, device: str) -> float:
    """The largest value over ranks (a step ends when its slowest rank does)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def relative_differences(got: list[float], expected: list[float]) -> list[float]:
    return [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, expected, strict=True)]


def window_means(losses: list[float], window: int = LOSS_WINDOW) -> list[float]:
    """The mean loss of each run of ``window`` steps (the last may be shorter)."""
    return [statistics.fmean(losses[i : i + window]) for i in range(0, len(losses), window)]


def check_losses(result: Result, eager: Result | None, rtol: float) -> None:
    """Compares the training curve with eager's (rank 0's data): the mean
    loss over each LOSS_WINDOW steps within ``rtol``; the largest difference
    of one step is reported beside it.

    Note [Loss curves, not steps]: two bf16 runs of the same training drift
    apart step by step, and a spike in one of them (eager's loss once rose
    from 10.66 to 11.17 for one step in the 65th of 70 steps of FSDP2 with
    bf16 parameters, where Inductor's and mybackend's agreed to 1e-4) fails
    a per-step check for every compiled backend; a systematic difference, a
    wrong gradient, moves every window's mean."""
    if eager is None or not eager.losses or not result.losses:
        return
    result.max_loss_rel_diff = max(relative_differences(result.losses, eager.losses))
    result.max_window_rel_diff = max(
        relative_differences(window_means(result.losses), window_means(eager.losses))
    )
    result.loss_ok = result.max_window_rel_diff <= rtol


def speedup_kept(results: list[Result]) -> dict[str, float]:
    """Per compiled backend, its speedup over eager under DDP divided by its
    speedup over eager in setup ``single`` (both measured in this run)."""
    ms = {(r.setup, r.backend): r.ms_per_step for r in results if r.error is None}
    kept: dict[str, float] = {}
    for (setup, backend), ddp_ms in ms.items():
        if setup != "ddp" or backend == "eager":
            continue
        single_ms, eager_single, eager_ddp = (
            ms.get(("single", backend)),
            ms.get(("single", "eager")),
            ms.get(("ddp", "eager")),
        )
        if ddp_ms and single_ms and eager_single and eager_ddp:
            kept[backend] = (eager_ddp / ddp_ms) / (eager_single / single_ms)
    return kept


def markdown(results: list[Result], args: argparse.Namespace, world: int) -> str:
    """The table rank 0 prints: one row per setup and backend."""
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    options = json.dumps(args.mybackend_options)
    lines = [
        f"GPT-2 {'tiny' if args.tiny else 'small'}, {world} x {device}, batch {args.batch}"
        f" x {args.seq} per rank, AdamW, {args.rounds} interleaved rounds of {args.steps} timed"
        f" steps after {args.warmup} (fsdp compile: {args.fsdp_compile}, mybackend options:"
        f" {options}, ddp options: {json.dumps(args.ddp_options)})",
        "",
        "| setup | backend | ms/step | rounds min-max | vs eager | max loss rel. diff,"
        f" step / {LOSS_WINDOW}-step mean | loss check | graphs | graph breaks | recompiles |"
        " floor c/e/m | fallbacks |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    eager_ms = {r.setup: r.ms_per_step for r in results if r.backend == "eager"}
    for r in results:
        if r.error is not None:
            reason = r.error.strip().splitlines()[-1][:120].replace("|", "/")
            lines.append(f"| {r.setup} | {r.backend} | failed: {reason} | | | | | | | | | |")
            continue
        base = eager_ms.get(r.setup)
        speedup = f"{base / r.ms_per_step:.2f}x" if base and r.ms_per_step else ""
        diff = (
            ""
            if r.max_loss_rel_diff is None or r.max_window_rel_diff is None
            else f"{r.max_loss_rel_diff:.1e} / {r.max_window_rel_diff:.1e}"
        )
        check = {None: "", True: "ok", False: "MISMATCH"}[r.loss_ok]
        spread = f"{min(r.ms_rounds):.2f}-{max(r.ms_rounds):.2f}" if r.ms_rounds else ""
        lines.append(
            f"| {r.setup} | {r.backend} | {r.ms_per_step:.2f} | {spread} | {speedup} | {diff} |"
            f" {check} |"
            f" {r.graphs} | {r.graph_breaks} | {r.recompiles} |"
            f" {'; '.join(floor_summary(floors) for floors in r.floors)} | {r.fallbacks} |"
        )
    lines += [
        "",
        "floor c/e/m: per rank, mybackend's graphs that its eager floors run compiled, run"
        " eagerly or still measure ('-': no graph has a floor, e.g. on the CPU).",
    ]
    kept = speedup_kept(results)
    if kept:
        lines += [
            "",
            "Share of the single-GPU speedup each backend keeps under DDP (issue 33: 0.95 or"
            " more): " + ", ".join(f"{backend} {share:.2f}" for backend, share in kept.items()),
        ]
    for r in results:
        if r.thread_cpu_ms and r.ms_per_step:
            busiest = sorted(r.thread_cpu_ms.items(), key=lambda item: -item[1])[:6]
            lines += [
                "",
                f"CPU ms per step by thread, {r.setup} {r.backend}, rank 0 (step"
                f" {r.ms_per_step:.2f} ms): "
                + ", ".join(f"{name} {ms:.1f}" for name, ms in busiest),
            ]
    for r in results:
        for rank, floors in enumerate(r.floors):
            timed = {name: text for name, text in floors.items() if "ms per call" in text}
            if timed:
                lines += ["", f"Eager floors, {r.setup} {r.backend}, rank {rank}:", ""]
                lines += [f"- {name}: {text}" for name, text in timed.items()]
    return "\n".join(lines)


def write_results(results: list[Result], args: argparse.Namespace, world: int) -> None:
    """results.md and results.json in --out (rewritten after each run)."""
    if args.out is None:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(markdown(results, args, world) + "\n")
    rows = [dataclasses.asdict(r) for r in results]
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = init_distributed(args.device, args.cpus_per_rank)
    results: list[Result] = []
    try:
        for setup in args.setups.split(","):
            setup_results = run_setup(args, setup, rank)
            eager = next((r for r in setup_results if r.backend == "eager" and not r.error), None)
            for result in setup_results:
                check_losses(result, eager, args.loss_rtol)
                results.append(result)
                if rank == 0:
                    print(f"{setup} {result.backend}: {result.ms_per_step} ms/step", flush=True)
            if rank == 0:
                write_results(results, args, world)  # what a stopped step leaves
        if rank == 0:
            print(markdown(results, args, world), flush=True)
        # No rank tears the group down while another still uses it: on the CPU
        # (gloo) a rank's exit then ended in std::terminate, 5 to 7 runs in 10.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    failed = any(r.error is not None or r.loss_ok is False for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
