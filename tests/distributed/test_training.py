"""DDP and FSDP2 under mybackend: two processes train the same small GPT-like
model eagerly and compiled, and the losses agree (issue 33).

One launch runs every scenario (tests/distributed/harness.py): starting two
processes that import torch costs more than the scenarios themselves. On
the CPU the processes use gloo; the GPU variants (two GPUs or more, NCCL)
run the same scenarios plus mode reduce-overhead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed.harness import STEPS, launch, scenarios

Records = dict[str, dict[str, Any]]

# On the CPU mybackend runs eager's own ATen kernels, so the losses agree
# to rounding; on GPUs its generated kernels and cuBLASLt sum in other orders.
CPU_RTOL = {"fp32": 1e-5, "bf16": 1e-3}
GPU_RTOL = {"fp32": 5e-3, "bf16": 3e-2}
COMPILED = [
    ("ddp-mybackend", "ddp-eager"),
    ("ddp-mybackend-no-optimize-ddp", "ddp-eager"),
    ("ddp-mybackend-cuda-graphs", "ddp-eager"),
    ("ddp-mybackend-compiled-autograd", "ddp-eager"),
    ("fsdp2-mybackend", "fsdp2-eager"),
    ("fsdp2-mp-mybackend", "fsdp2-mp-eager"),
    ("fsdp2-mybackend-blocks", "fsdp2-eager"),
    ("fsdp2-mp-mybackend-blocks", "fsdp2-mp-eager"),
]
FSDP2_COMPILED = [name for name, eager in COMPILED if name.startswith("fsdp2")]


def _record(records: Records, name: str) -> dict[str, Any]:
    """A scenario's record; fails with the error that stopped the run."""
    errors = [f"{key}:\n{value['error']}" for key, value in records.items() if "error" in value]
    if name not in records:
        pytest.fail(f"{name} did not run; " + ("\n".join(errors) or "no rank 0 records"))
    record = records[name]
    if "error" in record:
        pytest.fail(f"{name} raised:\n{record['error']}")
    return record


def check_losses(records: Records, compiled: str, eager: str, rtol: dict[str, float]) -> None:
    """The compiled run's losses equal eager's, step by step, and mybackend
    compiled every graph it was given (no fallback, no warning)."""
    got, expected = _record(records, compiled), _record(records, eager)
    dtype = "bf16" if "-mp-" in compiled else "fp32"
    assert len(got["losses"]) == STEPS
    torch.testing.assert_close(got["losses"], expected["losses"], rtol=rtol[dtype], atol=1e-6)
    torch.testing.assert_close(got["mean_loss"], expected["mean_loss"], rtol=rtol[dtype], atol=0)
    assert got["graphs"], "mybackend compiled nothing"
    assert not [g for g in got["graphs"] if g[2]], got["graphs"]
    assert not got["warnings"], got["warnings"]


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    return launch(scenarios(), Path(tmp_path_factory.mktemp("distributed")))


@pytest.mark.parametrize(("compiled", "eager"), COMPILED)
def test_losses_equal_eager(cpu_records: Records, compiled: str, eager: str) -> None:
    check_losses(cpu_records, compiled, eager, CPU_RTOL)


def test_ddp_optimizer_compiles_one_graph_pair_per_bucket(cpu_records: Records) -> None:
    """With optimize_ddp on, DDPOptimizer splits the dynamo graph at bucket
    boundaries and each bucket is one aot_autograd compile with a lazily
    compiled backward: the path that failed with "found bucket -1"."""
    split = _record(cpu_records, "ddp-mybackend")
    whole = _record(cpu_records, "ddp-mybackend-no-optimize-ddp")
    assert whole["aot_compiles"] == 1
    assert split["aot_compiles"] > 1
    kinds = [kind for _, kind, _ in split["graphs"]]
    assert kinds.count("forward") == kinds.count("backward") == split["aot_compiles"]


def test_compiled_autograd_backward_is_one_compiled_graph(cpu_records: Records) -> None:
    """Under compiled autograd (DDP's python reducer), the backward and its
    gradient all-reduces are one more graph, which mybackend compiles (no
    fallback: its list input is flattened)."""
    record = _record(cpu_records, "ddp-mybackend-compiled-autograd")
    assert record["aot_compiles"] == 2
    assert [kind for _, kind, _ in record["graphs"]] == ["forward", "inference"]
    # Its all-reduces are in the graph (Note [No floor across collectives]).
    assert record["collective_graphs"] == [record["graphs"][1][0]]


@pytest.mark.parametrize("name", FSDP2_COMPILED)
def test_fsdp2_compiles_one_graph_for_all_blocks(cpu_records: Records, name: str) -> None:
    """FSDP2's hooks are dynamo-disabled, so calling a sharded block is a
    graph break. Compiling the model, dynamo gives up the root's forward (the
    break is in a loop) and compiles what it calls as frames of their own:
    each block, and the head with the loss (one method, ``head_loss``).
    Compiling each block and ``head_loss`` gives the same two graphs without
    a break (dynamo counts none where it gives a whole frame up). Either way
    the blocks share one graph pair (no recompile per block), no graph holds
    a collective, and nothing runs in mybackend's fallback."""
    record = _record(cpu_records, name)
    assert record["unique_graphs"] == 2, record
    assert record["recompiles"] == 0, record
    if name.endswith("-blocks"):
        assert record["graph_breaks"] == 0, record
    kinds = sorted(kind for _, kind, _ in record["graphs"])
    assert kinds == ["backward", "backward", "forward", "forward"], record["graphs"]
    assert not [g for g in record["graphs"] if g[2]], record["graphs"]
    assert record["collective_graphs"] == [], record["collective_graphs"]


def test_fsdp2_is_seen_while_a_sharded_model_lives(cpu_records: Records) -> None:
    """fsdp2_in_use() (Note [Graphs under FSDP2]): true while FSDP2 trains,
    false in the DDP run before any FSDP2 model existed."""
    assert _record(cpu_records, "ddp-eager")["fsdp2_in_use"] is False
    for name in ("fsdp2-eager", *FSDP2_COMPILED):
        assert _record(cpu_records, name)["fsdp2_in_use"] is True, name


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize(
    ("compiled", "eager"), [*COMPILED, ("ddp-mybackend-reduce-overhead", "ddp-eager")]
)
def test_losses_equal_eager_on_two_gpus(gpu_records: Records, compiled: str, eager: str) -> None:
    check_losses(gpu_records, compiled, eager, GPU_RTOL)


@pytest.fixture(scope="module")
def gpu_records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    return launch(
        scenarios(gpu=True), Path(tmp_path_factory.mktemp("distributed-gpu")), device="cuda"
    )
