"""Training runs under torch.distributed, several processes, for the tests.

``launch`` starts ``world`` processes (torch.multiprocessing, spawn) that
join one process group (gloo on the CPU, NCCL on GPUs) and run each
``Scenario`` in turn: the same small GPT-like model, wrapped in
DistributedDataParallel or sharded with FSDP2's ``fully_shard``, trained a
few AdamW steps eagerly or under ``torch.compile``. Every rank writes what
it saw (losses per step, graphs mybackend compiled, fallbacks, warnings) to
a JSON file, and ``launch`` returns rank 0's records by scenario name.

A scenario that raises is recorded with its traceback and ends the run (the
other rank may be waiting in a collective the failing one never reaches);
the scenarios after it are missing from the result, and their tests say
which scenario stopped the run.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.spawn import ProcessException

from tests.testing import HANG_GUARD_S

STEPS = 4
BATCH, SEQ, VOCAB, WIDTH, HEADS, DEPTH = 4, 32, 256, 128, 4, 4
# DDPOptimizer asserts its first bucket (1 MiB, DDP's) fits the others, so
# 1 MiB is the smallest cap; the model (3.3 MB of fp32 parameters) then
# splits into several buckets, hence several graphs per dynamo graph.
DDP_BUCKET_CAP_MB = 1
# The record under which launch() reports a rank that raised or died.
LAUNCH_FAILURE = "launch"


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One training run: how the model is wrapped and compiled."""

    name: str
    wrap: str  # "ddp" or "fsdp2"
    backend: str | None = None  # None: eager
    mode: str | None = None
    options: dict[str, Any] | None = None
    optimize_ddp: bool | str = True
    compiled_autograd: bool = False
    mixed_precision: bool = False  # FSDP2: bf16 parameters, fp32 gradient reduction
    # FSDP2: compile each block and the head with the loss instead of the
    # model (docs/distributed.md, "FSDP2").
    compile_blocks: bool = False


class Block(nn.Module):
    """A pre-norm transformer block: causal attention, then a GELU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(batch, seq, 3, HEADS, -1).unbind(2)
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, WIDTH))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    """Embeddings, DEPTH blocks, a final norm and an untied head; returns the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head_loss(x, targets)

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def scenarios(gpu: bool = False) -> list[Scenario]:
    """What the tests run, the riskiest last (a failure ends the run). Mode
    reduce-overhead is the option cuda_graphs (docs/options.md), which a CPU
    graph ignores: it runs on the CPU once, under the option's name, and on
    GPUs under both names."""
    modes = [
        Scenario("ddp-mybackend-cuda-graphs", "ddp", "mybackend", options={"cuda_graphs": True})
    ]
    if gpu:
        modes.append(
            Scenario("ddp-mybackend-reduce-overhead", "ddp", "mybackend", mode="reduce-overhead")
        )
    return [
        Scenario("ddp-eager", "ddp"),
        Scenario("ddp-mybackend", "ddp", "mybackend"),
        Scenario("ddp-mybackend-no-optimize-ddp", "ddp", "mybackend", optimize_ddp=False),
        *modes,
        Scenario("fsdp2-eager", "fsdp2"),
        Scenario("fsdp2-mybackend", "fsdp2", "mybackend"),
        Scenario("fsdp2-mp-eager", "fsdp2", mixed_precision=True),
        Scenario("fsdp2-mp-mybackend", "fsdp2", "mybackend", mixed_precision=True),
        Scenario("fsdp2-mybackend-blocks", "fsdp2", "mybackend", compile_blocks=True),
        Scenario(
            "fsdp2-mp-mybackend-blocks",
            "fsdp2",
            "mybackend",
            mixed_precision=True,
            compile_blocks=True,
        ),
        Scenario(
            "ddp-mybackend-compiled-autograd",
            "ddp",
            "mybackend",
            optimize_ddp="python_reducer",
            compiled_autograd=True,
        ),
    ]


def free_port() -> int:
    """A TCP port free now on this host (the rendezvous of one launch)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    chosen: Sequence[Scenario], out_dir: Path, *, world: int = 2, device: str = "cpu"
) -> dict[str, dict[str, Any]]:
    """Runs the scenarios in ``world`` processes; rank 0's records by name."""
    port = free_port()
    context = mp.start_processes(
        _worker,
        args=(world, port, list(chosen), str(out_dir), device),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    failure = None
    try:
        # join() returns once a process ended (True when all have) or the
        # hang guard ran out, and raises when a rank failed or died (ending
        # the others): at most one call per rank.
        for _ in range(world):
            if context.join(HANG_GUARD_S):
                break
        else:
            raise AssertionError(f"distributed run still going after {HANG_GUARD_S:.0f} s")
    except ProcessException as error:  # the failing rank's traceback, or its signal
        failure = str(error)
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
    path = out_dir / "rank0.json"
    records: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    if failure is not None:
        records[LAUNCH_FAILURE] = {"error": failure}
    return records


def _worker(
    rank: int, world: int, port: int, chosen: list[Scenario], out_dir: str, device: str
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # NVLink multicast (NVLS) stays off on the GPU machines (their notes say why).
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=HANG_GUARD_S)
    )
    records: dict[str, dict[str, Any]] = {}
    path = Path(out_dir) / f"rank{rank}.json"
    try:
        for scenario in chosen:
            try:
                records[scenario.name] = run_scenario(scenario, rank, world, device)
            except Exception:
                records[scenario.name] = {"error": traceback.format_exc()}
                raise
            finally:
                path.write_text(json.dumps(records))
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()


@contextmanager
def _dynamo_settings(scenario: Scenario) -> Iterator[None]:
    """A fresh dynamo with the scenario's DDP mode and compiled autograd."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(
        optimize_ddp=scenario.optimize_ddp, compiled_autograd=scenario.compiled_autograd
    ):
        yield
    torch._dynamo.reset()


def run_scenario(scenario: Scenario, rank: int, world: int, device: str) -> dict[str, Any]:
    """Trains STEPS steps; returns the losses and what mybackend compiled."""
    from torch._dynamo.utils import counters

    from mybackend._logging import reset_warnings
    from mybackend.distributed import fsdp2_in_use, has_collectives
    from mybackend.reports import collecting

    reset_warnings()
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    losses = []
    with (
        _dynamo_settings(scenario),  # DDP reads optimize_ddp when constructed
        collecting() as graphs,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        torch.manual_seed(0)  # the same initial weights on every rank
        model = _wrap(TinyGPT().to(device), scenario, device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        step = _compiled_step(model, scenario)
        counters.clear()
        for _ in range(STEPS):
            tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator).to(device)
            targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator).to(device)
            loss = step(tokens, targets)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach().float().item())
        stats = {key: dict(value) for key, value in counters.items()}
        recompiles = _recompiles()
        sharded = fsdp2_in_use()
    return {
        "losses": losses,
        # Averaged over ranks as DDP averages gradients: equal on all ranks.
        "mean_loss": _mean_over_ranks(losses[-1], world, device),
        "graphs": [(g.name, g.kind, g.fallback_reason) for g in graphs],
        # Graphs that call a collective (Note [No floor across collectives]).
        "collective_graphs": [g.name for g in graphs if g.gm is not None and has_collectives(g.gm)],
        "aot_compiles": stats.get("aot_autograd", {}).get("total", 0),
        "unique_graphs": stats.get("stats", {}).get("unique_graphs", 0),
        "graph_breaks": sum(stats.get("graph_break", {}).values()),
        "recompiles": recompiles,
        "fsdp2_in_use": sharded,
        "warnings": [str(w.message) for w in caught if "mybackend" in str(w.message)],
    }


def _compiled_step(model: nn.Module, scenario: Scenario) -> Callable[..., torch.Tensor]:
    """Forward and backward of one step: the model compiled, or the whole
    step where compiled autograd is on (it applies to backward calls made
    inside a compiled function, so torch.compile must see the backward)."""

    def train_step(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = forward(tokens, targets)
        loss.backward()
        return loss

    forward: Callable[..., torch.Tensor] = model
    if scenario.backend is None:
        return train_step
    kwargs: dict[str, Any] = {"backend": scenario.backend}
    if scenario.mode is not None:
        kwargs["mode"] = scenario.mode
    if scenario.options is not None:
        kwargs["options"] = scenario.options
    if scenario.compiled_autograd:
        return torch.compile(train_step, **kwargs)
    if scenario.compile_blocks:
        assert isinstance(model, TinyGPT)
        for block in model.blocks:
            block.compile(**kwargs)
        model.head_loss = torch.compile(model.head_loss, **kwargs)  # type: ignore[method-assign]
        return train_step
    forward = torch.compile(model, **kwargs)
    return train_step


def _recompiles() -> int:
    """Compiles of a frame after its first since the last dynamo reset
    (dynamo's "[frame/compile]" numbering)."""
    from torch._dynamo import convert_frame

    return sum(max(count - 1, 0) for count in convert_frame.FRAME_COMPILE_COUNTER.values())


def _wrap(model: nn.Module, scenario: Scenario, device: str) -> nn.Module:
    if scenario.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [torch.cuda.current_device()] if device == "cuda" else None
        return DistributedDataParallel(
            model, device_ids=device_ids, bucket_cap_mb=DDP_BUCKET_CAP_MB
        )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if scenario.mixed_precision:
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def _mean_over_ranks(value: float, world: int, device: str) -> float:
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item()) / world
