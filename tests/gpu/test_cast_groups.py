"""GPU-marked: cast groups (Note [Grouped casts]) against eager's .to().

Independent fp32 casts of odd sizes become one multi-tensor kernel; a
non-contiguous input is cast alone (planned so, or, when only the call's
tensor is strided, by the per-cast fallback); weights copied into
channels-last join as layout copies (Note [Grouped layout copies]); the group
is timed against its ATen form; results are bit-exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mybackend import _C
from mybackend.lowering import lower
from tests.testing import compiled_records

pytestmark = pytest.mark.gpu

SIZES = [(1,), (7,), (4099,), (1 << 20,)]
DTYPES = [torch.bfloat16, torch.float16]
# The group floor would time each group against ATen on its first call.
NO_FLOOR = {"eager_floor": False}
CHANNELS_LAST = torch.channels_last
# Convolution weights: a % 8 == 0 (vectors), odd a, a 3-channel stem, a 1x1
# (its copy keeps the element order), a 5x5.
LAYOUT_WEIGHTS = [(64, 32, 3, 3), (33, 17, 7, 7), (32, 3, 7, 7), (16, 8, 1, 1), (128, 64, 5, 5)]


def _launches(fn: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """fn's result and how many cast-group, pointwise and tiled-copy kernels
    it launched."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    return result, {
        prefix: sum(name.startswith(prefix) for name in names)
        for prefix in ("mb_cast_group_", "mb_pointwise_", "mb_transpose_")
    }


def _assert_bit_exact(got: Any, expected: Any) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
        assert torch.equal(g.view(torch.int16), e.view(torch.int16)), (g, e)


def _cast_all(dtype: torch.dtype) -> Callable[..., tuple[torch.Tensor, ...]]:
    return lambda *xs: tuple(x.to(dtype) for x in xs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_casts_of_odd_sizes_run_as_one_kernel(dtype: torch.dtype) -> None:
    xs = [torch.randn(size, device="cuda") for size in SIZES]
    strided = torch.randn(65, 33, device="cuda").t()  # planned as a lone cast
    fn = _cast_all(dtype)
    compiled = torch.compile(
        fn, backend="mybackend", options={"strict": True, "generated_kernels": True, **NO_FLOOR}
    )
    (got, launched), records = compiled_records(lambda: _launches(lambda: compiled(*xs, strided)))
    _assert_bit_exact(got, fn(*xs, strided))
    (record,) = [r for r in records if r.core_report]
    groups = [k for k in record.core_report["kernels"] if k["kind"] == "cast_group"]
    assert len(groups) == 1 and len(groups[0]["nodes"]) == len(SIZES), groups
    stats = record.compiled.stats()
    assert stats["generated_cast_groups_run"] == 1, stats
    assert stats["generated_kernel_fallbacks"] == 0, stats
    assert launched == {"mb_cast_group_": 1, "mb_pointwise_": 1, "mb_transpose_": 0}, launched


def test_weight_casts_with_layout_copies_run_in_the_group() -> None:
    """Note [Copies beside a cast]: 1x1 weights cast and copied into
    channels-last run in the cast group, bit-exact with eager, strides
    included; so does the 3x3 weight's, as a layout copy (Note [Grouped
    layout copies])."""
    weights = [torch.randn(shape, device="cuda") for shape in ((64, 33, 1, 1), (7, 5, 1, 1))]
    weights.append(torch.randn(16, 8, 3, 3, device="cuda"))

    def fn(*ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(w.to(torch.bfloat16).clone(memory_format=CHANNELS_LAST) for w in ws)

    options = {"strict": True, "generated_kernels": True, **NO_FLOOR}
    compiled = torch.compile(fn, backend="mybackend", options=options)
    (got, launched), records = compiled_records(lambda: _launches(lambda: compiled(*weights)))
    _assert_bit_exact(got, fn(*weights))
    (record,) = [r for r in records if r.core_report]
    stats = record.compiled.stats()
    assert stats["generated_cast_groups_run"] == 1, stats
    assert stats["generated_transposes_run"] == 0, stats
    assert stats["generated_kernel_fallbacks"] == 0, stats
    assert launched == {"mb_cast_group_": 1, "mb_pointwise_": 0, "mb_transpose_": 0}, launched


def _core_compile(fn: Callable[..., Any], examples: list[torch.Tensor]) -> Any:
    lowered = lower(make_fx(fn, tracing_mode="fake")(*examples), [])
    return _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)


def _assert_equal_copies(got: Any, expected: Any) -> None:
    """Copies and casts are exact: equal values (randn has no NaN), dtypes and strides."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g.dtype, g.shape, g.stride()) == (e.dtype, e.shape, e.stride())
        assert torch.equal(g, e)


@pytest.mark.parametrize(
    ("dtype", "cast"),
    [(torch.bfloat16, False), (torch.float32, False), (torch.float32, True)],
    ids=["bf16", "fp32", "fp32_cast_bf16"],
)
def test_weight_layout_copies_run_as_one_kernel(dtype: torch.dtype, cast: bool) -> None:
    """Note [Grouped layout copies]: channels-last copies of convolution
    weights, with or without autocast's cast, are one launch of the cast
    group: vector and element paths, a 3-channel stem, a 1x1 weight."""
    weights = [torch.randn(shape, device="cuda", dtype=dtype) for shape in LAYOUT_WEIGHTS]

    def fn(*ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(
            (w.to(torch.bfloat16) if cast else w).clone(memory_format=CHANNELS_LAST) for w in ws
        )

    compiled = _core_compile(fn, weights)
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "cast_group"]
    assert "4 change layout (Note [Grouped layout copies])" in group["why"], group["why"]
    got, launched = _launches(lambda: compiled.run(list(weights)))
    _assert_equal_copies(got, fn(*weights))
    assert launched == {"mb_cast_group_": 1, "mb_pointwise_": 0, "mb_transpose_": 0}, launched
    stats = compiled.stats()
    assert stats["generated_cast_groups_run"] == 1 and stats["generated_kernel_fallbacks"] == 0


def test_a_layout_copy_of_other_strides_runs_alone() -> None:
    """Compiled for contiguous weights, called with one already in
    channels-last: that member leaves the table for this call; every result
    is still eager's copy."""
    shapes = LAYOUT_WEIGHTS[:3]
    examples = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for shape in shapes]

    def fn(*ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(w.clone(memory_format=CHANNELS_LAST) for w in ws)

    compiled = _core_compile(fn, examples)
    inputs = [*examples]
    inputs[1] = torch.randn(shapes[1], device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=CHANNELS_LAST
    )
    got = compiled.run(list(inputs))
    _assert_equal_copies(got, fn(*inputs))
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "cast_group"]
    assert "ran alone" in group["problem"] or compiled.stats()["generated_kernel_fallbacks"] == 1, (
        group,
        compiled.stats(),
    )


def test_a_cast_group_is_timed_against_its_aten_form(tmp_path: Any) -> None:
    """Note [A group is timed against its ATen form]: the first call times
    the group and its ATen calls; the report says which runs, and both give
    eager's values."""
    weights = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for shape in LAYOUT_WEIGHTS]

    def fn(*ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(w.clone(memory_format=CHANNELS_LAST) for w in ws)

    options = {"strict": True, "eager_floor": True, "kernel_cache_dir": str(tmp_path)}
    compiled = torch.compile(fn, backend="mybackend", options=options)
    first, records = compiled_records(lambda: compiled(*weights))
    second = compiled(*weights)
    for got in (first, second):
        _assert_equal_copies(got, fn(*weights))
    (record,) = [r for r in records if r.compiled is not None]
    (group,) = [k for k in record.compiled.report()["kernels"] if k["kind"] == "cast_group"]
    timed = re.fullmatch(
        r"timed against ATen: engine ([\d.]+) us, ATen ([\d.]+) us: (ATen|engine) runs",
        group["floor"],
    )
    assert timed, group["floor"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_strided_call_takes_the_per_cast_fallback(dtype: torch.dtype) -> None:
    """Compiled for contiguous inputs, called with a transposed one and an
    unaligned one: the first runs its own pointwise kernel, the second stays
    in the group (element by element), all bit-exact."""
    examples = [torch.randn(size, device="cuda") for size in SIZES] + [
        torch.randn(33, 65, device="cuda")
    ]
    fn = _cast_all(dtype)
    lowered = lower(make_fx(fn, tracing_mode="fake")(*examples), [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "cast_group"]
    assert len(group["nodes"]) == len(examples)

    storage = torch.randn(4099 + 1, device="cuda")
    inputs = [*examples]
    inputs[2] = storage[1:]  # contiguous, 4-byte aligned only
    inputs[-1] = torch.randn(65, 33, device="cuda").t()  # the compiled shape, strided
    got, launched = _launches(lambda: compiled.run(list(inputs)))
    _assert_bit_exact([g.contiguous() for g in got], [e.contiguous() for e in fn(*inputs)])
    assert launched == {"mb_cast_group_": 1, "mb_pointwise_": 1, "mb_transpose_": 0}, launched
    stats = compiled.stats()
    assert stats["generated_cast_groups_run"] == 1 and stats["generated_kernel_fallbacks"] == 0
    (group,) = [k for k in compiled.report()["kernels"] if k["kind"] == "cast_group"]
    assert "1 of 5 members ran alone" in group["problem"], group["problem"]


def test_more_tensors_than_one_table_holds() -> None:
    """130 casts: two launches of the one kernel (96 tensors a table)."""
    xs = [torch.randn(k % 9 + 1, 3, device="cuda") for k in range(130)]
    fn = _cast_all(torch.bfloat16)
    lowered = lower(make_fx(fn, tracing_mode="fake")(*xs), [])
    compiled = _C.compile(lowered.graph, {"generated_kernels": True}, lowered.run_python_node)
    got, launched = _launches(lambda: compiled.run(list(xs)))
    _assert_bit_exact(got, fn(*xs))
    assert launched == {"mb_cast_group_": 2, "mb_pointwise_": 0, "mb_transpose_": 0}, launched


def test_cuda_graph_replays_the_cast_group() -> None:
    fn = torch.compile(
        lambda a, b, c: (a.to(torch.bfloat16), b.to(torch.float16), c.to(torch.bfloat16)),
        backend="mybackend",
        options={"cuda_graphs": True, **NO_FLOOR},
    )
    records = []
    for _ in range(4):
        xs = [torch.randn(size, device="cuda") for size in SIZES[1:]]
        got, new = compiled_records(lambda xs=xs: fn(*xs))
        records += new
        expected = (xs[0].to(torch.bfloat16), xs[1].to(torch.float16), xs[2].to(torch.bfloat16))
        _assert_bit_exact(got, expected)
    stats: dict[str, int] = {}
    for record in records:
        for key, value in record.compiled.stats().items():
            stats[key] = stats.get(key, 0) + value
    assert stats["cuda_graph_captures"] == 1 and stats["cuda_graph_replays"] >= 2, stats
    assert stats["generated_cast_groups_run"] >= 1, stats
