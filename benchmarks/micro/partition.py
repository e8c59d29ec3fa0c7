"""Partitioner scale benchmark: random DAGs of 20,000 nodes through the C++
partitioner (mybackend._C.partition_dag), median of several graphs. CPU only.

    python -m benchmarks.micro.partition [--nodes 20000] [--graphs 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from mybackend import _C


def random_dag(nodes: int, seed: int, window: int = 0) -> tuple[list[list[int]], list[bool]]:
    """Producers drawn from all earlier nodes (window=0) or the previous `window`."""
    rng = random.Random(seed)
    producers = []
    for i in range(nodes):
        low = max(0, i - window) if window else 0
        count = min(i - low, rng.randint(1, 4))
        producers.append(sorted(rng.sample(range(low, i), count)) if count > 0 else [])
    return producers, [rng.random() < 0.7 for _ in range(nodes)]


def time_partition(nodes: int, graphs: int, window: int) -> tuple[float, float]:
    """Median seconds and median partition count over `graphs` random DAGs."""
    seconds, counts = [], []
    for seed in range(graphs):
        producers, supported = random_dag(nodes, seed, window)
        view_only = [False] * nodes
        start = time.perf_counter()
        result = _C.partition_dag(producers, supported, view_only)
        seconds.append(time.perf_counter() - start)
        counts.append(len(result["partitions"]))
    return statistics.median(seconds), statistics.median(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--graphs", type=int, default=5)
    args = parser.parse_args()
    print("| producers | nodes | median ms (incl. Python->C++ conversion) | partitions |")
    print("|---|---|---|---|")
    for label, window in (("any earlier node", 0), ("previous 32 nodes", 32)):
        seconds, count = time_partition(args.nodes, args.graphs, window)
        print(f"| {label} | {args.nodes} | {seconds * 1e3:.1f} | {count:.0f} |")


if __name__ == "__main__":
    main()
