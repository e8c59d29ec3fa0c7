"""Seconds of mybackend's graph rewrites on a model's joint graph.

``python -m benchmarks.graph_passes --models resnet50,gpt2`` runs one
training step of each model through mybackend (batch 2 unless ``--batch``,
bf16 autocast, on the CPU unless a GPU is there), keeps the joint graph
aot_autograd hands the partitioner, and times the rewrites that run on it
before the min-cut partitioner: the channels-last layout plan and the
matrix-product padding (Note [Channels-last planning], Note [Aligned
matrix products]), ``--repeats`` times each, fastest kept. On the CPU,
batch norm is rewritten and products are padded as they would be on CUDA,
so the graphs are the GPU's. docs/performance.md ("Compile time") shows
its tables.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

import mybackend.aot as aot
import mybackend.ops.batch_norm as batch_norm
from benchmarks.models import get_model
from mybackend.passes.layout import placeholder_values, plan_channels_last
from mybackend.passes.matmul_padding import pad_matmuls


def joint_graph(model: str, batch: int, device: str) -> torch.fx.GraphModule:
    """The joint graph of one compiled training step of ``model``."""
    captured: list[torch.fx.GraphModule] = []
    partition = aot._partition

    def capture(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        captured.append(joint)
        return partition(joint, joint_inputs, **kwargs)

    spec = get_model(model)
    module = spec.build(False).to(device)
    inputs = [
        t.to(device) for t in spec.make_inputs(batch, False, torch.Generator().manual_seed(0))
    ]
    torch._dynamo.reset()
    aot._partition = capture
    try:
        with torch.autocast(device, dtype=torch.bfloat16):
            out = torch.compile(module, backend="mybackend")(*inputs)
        out.float().sum().backward()
    finally:
        aot._partition = partition
    return captured[0]


def time_passes(joint: torch.fx.GraphModule, device: str, repeats: int) -> dict[str, Any]:
    """Fastest seconds of each rewrite over ``repeats`` runs, and what it did."""
    layout_s, padding_s = float("inf"), float("inf")
    copies = padded = 0
    for _ in range(repeats):
        start = time.perf_counter()
        planned, copies = plan_channels_last(joint, placeholder_values(joint))
        layout_s = min(layout_s, time.perf_counter() - start)
        start = time.perf_counter()
        _, padded = pad_matmuls(planned, placeholder_values(planned), "joint", (device, "cuda"))
        padding_s = min(padding_s, time.perf_counter() - start)
    nodes = len(joint.graph.nodes)
    return {"nodes": nodes, "layout": (layout_s, copies), "padding": (padding_s, padded)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,gpt2")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.device == "cpu":  # the graphs CUDA would get
        batch_norm.REWRITTEN_DEVICES = ("cpu", "cuda")
    print("| joint graph | nodes | layout plan s (copies) | padding s (products) |")
    print("|---|---|---|---|")
    for model in args.models.split(","):
        row = time_passes(joint_graph(model, args.batch, args.device), args.device, args.repeats)
        layout_s, copies = row["layout"]
        padding_s, padded = row["padding"]
        print(
            f"| {model} | {row['nodes']} | {layout_s:.3f} ({copies}) | {padding_s:.3f} ({padded}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
