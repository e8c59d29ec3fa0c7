"""Stage 6: property tests of the C++ partitioner on random DAGs, and the
differential test against torch.fx's CapabilityBasedPartitioner (a test
oracle only: the backend never runs it)."""

from __future__ import annotations

import operator
import random
import statistics

import pytest
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from mybackend import _C


def random_dag(rng: random.Random, n: int) -> tuple[list[list[int]], list[bool]]:
    producers = []
    for i in range(n):
        fan_in = rng.randint(0, min(i, 3))
        producers.append(sorted(rng.sample(range(i), fan_in)) if fan_in else [])
    supported = [rng.random() < 0.7 for _ in range(n)]
    return producers, supported


def contracted_is_acyclic(producers: list[list[int]], part_of: list[int]) -> bool:
    n = len(producers)
    key = [("p", p) if p >= 0 else ("n", i) for i, p in enumerate(part_of)]
    edges: dict[tuple[str, int], set[tuple[str, int]]] = {k: set() for k in key}
    for i in range(n):
        for p in producers[i]:
            if key[p] != key[i]:
                edges[key[p]].add(key[i])
    state: dict[tuple[str, int], int] = {}

    def visit(k: tuple[str, int]) -> bool:
        state[k] = 1
        for m in edges[k]:
            if state.get(m) == 1 or (m not in state and not visit(m)):
                return False
        state[k] = 2
        return True

    return all(k in state or visit(k) for k in list(edges))


@pytest.mark.parametrize("seed", range(300))
def test_random_dag_properties(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    producers, supported = random_dag(rng, n)
    view_only = [rng.random() < 0.15 for _ in range(n)]
    result = _C.partition_dag(producers, supported, view_only)
    part_of = result["partition_of"]
    dropped = {node for node, _ in result["dropped"]}
    for i in range(n):
        if not supported[i]:
            assert part_of[i] == -1
        else:
            assert (part_of[i] >= 0) != (i in dropped), i
    for members in result["partitions"]:
        assert members == sorted(members) and not all(view_only[m] for m in members)
    assert contracted_is_acyclic(producers, part_of)
    again = _C.partition_dag(producers, supported, view_only)
    assert again == result  # deterministic
    steps = result["schedule"]
    assert len(steps) == len(result["partitions"]) + sum(1 for p in part_of if p < 0)


def test_min_partition_size_and_single_nodes() -> None:
    # 0 -> 1 -> 2 (supported chain) -> 3 (unsupported) -> 4 (supported, cut off)
    producers = [[], [0], [1], [2], [3]]
    supported = [True, True, True, False, True]
    result = _C.partition_dag(producers, supported, [False] * 5, min_partition_size=2)
    assert result["partitions"] == [[0, 1, 2]]
    assert result["dropped"][0][0] == 4 and "min_partition_size=2" in result["dropped"][0][1]
    result = _C.partition_dag(producers, supported, [False] * 5, allow_single_node_partition=False)
    assert result["partitions"] == [[0, 1, 2]]


def test_merge_that_would_create_a_cycle_is_refused() -> None:
    # 0 -> 1 (unsupported) -> 2, and 0 -> 2: {0, 2} would form a cycle with 1.
    result = _C.partition_dag([[], [0], [0, 1]], [True, False, True], [False] * 3)
    assert len(result["partitions"]) == 2


class _NameSupport(OperatorSupportBase):
    def __init__(self, supported: set[str]) -> None:
        self.supported = supported

    def is_node_supported(self, submodules: object, node: torch.fx.Node) -> bool:
        return node.name in self.supported


def _fx_graph(producers: list[list[int]]) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    nodes: list[torch.fx.Node] = []
    for i, deps in enumerate(producers):
        args = [nodes[d] for d in deps] or [x]
        node = graph.call_function(operator.add, (args[0], args[-1]))  # fan-in is at most 2
        node.name = f"n{i}"
        nodes.append(node)
    graph.output(nodes[-1])
    return torch.fx.GraphModule({}, graph)


def test_differential_against_torch_partitioner() -> None:
    ours, theirs = [], []
    for seed in range(200):
        rng = random.Random(1000 + seed)
        n = rng.randint(2, 30)
        producers = [sorted(rng.sample(range(i), min(i, rng.randint(0, 2)))) for i in range(n)]
        supported = [rng.random() < 0.7 for _ in range(n)]
        gm = _fx_graph(producers)
        names = {f"n{i}" for i in range(n) if supported[i]}
        partitions = CapabilityBasedPartitioner(
            gm, _NameSupport(names), allows_single_node_partition=True
        ).propose_partitions()
        torch_covered = {node.name for p in partitions for node in p.nodes} & names
        result = _C.partition_dag(producers, supported, [False] * n)
        our_covered = {f"n{i}" for i, p in enumerate(result["partition_of"]) if p >= 0}
        assert our_covered == names
        assert torch_covered == names
        ours.append(len(result["partitions"]))
        theirs.append(len(partitions))
    assert statistics.mean(ours) <= statistics.mean(theirs), (
        statistics.mean(ours),
        statistics.mean(theirs),
    )
