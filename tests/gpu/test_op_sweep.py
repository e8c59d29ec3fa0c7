"""GPU-marked: OpInfo sweep of the pointwise CUDA path (generated kernels).

For every overload of the pointwise lowering table
(``_C.generated_pointwise_ops()``) that has an OpInfo in PyTorch's op_db,
OpInfo's sample inputs in fp32, bf16 and fp16, and extra layouts
(broadcasting, transposed, sliced, channels_last, zero-size, size-1, odd
sizes; LAYOUTS_OF says which per dtype), run on CUDA through
``torch.compile(backend="mybackend")`` with generated kernels on, single ops
fused (``min_fused_nodes=1``) and strict mode, against eager
on separate copies of the inputs. fp32 is compared at assert_close's
defaults (tight), bf16/fp16 at their defaults, NaN equal to NaN.

A case counts as exercised only if the op ran inside a generated kernel on
that call (tests/op_sweep.py, ``generated_ops``); the rest are listed as
"not exercised" in the summary printed at the end. The last test fails when
an overload with OpInfos never ran in a generated kernel, except overloads
that aot_autograd decomposes before the backend sees them (listed too).

    python -m pytest tests/gpu/test_op_sweep.py -q
    MYBACKEND_SWEEP_SAMPLES=8 ...   # OpInfo samples per OpInfo and dtype (default 2)

docs/contributing.md ("The OpInfo sweep") says more.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_leaves

from mybackend import _C
from mybackend.aot import compile_aten_graph
from mybackend.decompositions import decomposition_table
from mybackend.options import Options
from mybackend.reports import collecting
from tests.op_sweep import (
    Case,
    SweepLog,
    decomposed_overloads,
    generated_ops,
    match_opinfos,
    numbers_for_scalar_arguments,
    opinfo_id,
    why_not_generated,
)

pytestmark = [
    pytest.mark.gpu,
]

pytest.importorskip("expecttest")  # op_db's module imports it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

# The sweep's device; the CPU works too for a dry run of the machinery
# (no case is exercised there: generated kernels are CUDA only).
DEVICE = "cuda"
OPTIONS = {"generated_kernels": True, "min_fused_nodes": 1, "strict": True}
_OPTIONS = Options.from_user(None, OPTIONS)
_TABLE = decomposition_table()
SAMPLES = int(os.environ.get("MYBACKEND_SWEEP_SAMPLES", "2"))
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# For OpInfos that take no floating dtype (bitwise ops).
OTHER_DTYPES = (torch.int32, torch.bool)

TABLE = _C.generated_pointwise_ops()
MATCHED = match_opinfos(TABLE, op_db)
UNREACHABLE = decomposed_overloads(TABLE, decomposition_table())
MATCHED_IDS = {o: [opinfo_id(i) for i in infos] for o, infos in MATCHED.items()}
# Each OpInfo once, with the table overloads it may run.
OPINFOS: dict[str, tuple[Any, list[str]]] = {}
for _overload, _infos in MATCHED.items():
    for _info in _infos:
        OPINFOS.setdefault(opinfo_id(_info), (_info, []))[1].append(_overload)

LOG = SweepLog()


@pytest.fixture(scope="module", autouse=True)
def _summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    text = LOG.summary(MATCHED_IDS, UNREACHABLE)
    if reporter is not None:
        reporter.write_line("")
        for line in text.splitlines():
            reporter.write_line(line)
    else:
        print(text)


# --- inputs ---------------------------------------------------------------


class Call:
    """A function and its arguments with the tensors pulled out, so that the
    compiled function takes only tensors and every other argument is a
    constant of its graph (no dynamic scalars, no recompiles on values)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        # (True, position) for a positional tensor, (False, name) for a keyword one.
        self.slots = [(True, i) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.slots += [(False, k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        self.tensors = [args[i] if positional else kwargs[i] for positional, i in self.slots]

    def bind(self, tensors: Sequence[torch.Tensor]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments with `tensors` in the tensors' places."""
        args, kwargs = list(self.args), dict(self.kwargs)
        for (positional, i), t in zip(self.slots, tensors, strict=True):
            if positional:
                args[i] = t
            else:
                kwargs[i] = t
        return args, kwargs

    def with_tensors(self, tensors: Sequence[torch.Tensor]) -> Call:
        args, kwargs = self.bind(tensors)
        return Call(self.fn, tuple(args), kwargs)

    def run(self, *tensors: torch.Tensor) -> Any:
        args, kwargs = self.bind(tensors)
        return self.fn(*args, **kwargs)


def _is_flat(sample: Any) -> bool:
    """Tensors only at the top level of the arguments (no tensor lists)."""
    values = [sample.input, *sample.args, *sample.kwargs.values()]
    nested = [v for v in values if isinstance(v, list | tuple)]
    return isinstance(sample.input, torch.Tensor) and not any(
        isinstance(leaf, torch.Tensor) for leaf in tree_leaves(nested)
    )


def _copy(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Copies with the same sizes, strides, offsets and aliasing among them
    (whole storages are copied), so eager and compiled runs share nothing."""
    storages: dict[int, Any] = {}
    out = []
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = t.untyped_storage().clone()
        copy = torch.empty(0, dtype=t.dtype, device=t.device)
        copy.set_(storages[key], t.storage_offset(), t.size(), t.stride())
        out.append(copy)
    return out


def _values_like(t: torch.Tensor, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Random values of t's dtype in t's range (so domains such as log's
    hold), drawn on the CPU from `g` (deterministic), placed on t's device."""
    if t.dtype == torch.bool:
        values = torch.randint(0, 2, shape, generator=g).bool()
    elif not t.dtype.is_floating_point:
        lo, hi = (int(t.min().item()), int(t.max().item())) if t.numel() else (-2, 2)
        values = torch.randint(lo, hi + 1, shape, generator=g).to(t.dtype)
    else:
        lo, hi = (t.min().item(), t.max().item()) if t.numel() else (-2.0, 2.0)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            lo, hi = -2.0, 2.0  # the sample holds NaN or inf: any finite range will do
        values = (lo + (hi - lo) * torch.rand(shape, generator=g)).to(t.dtype)
    return values.to(t.device)


# Shapes of the extra layouts, built from an allocation and a view of it.
_LAYOUTS: dict[str, Callable[[Callable[[tuple[int, ...]], torch.Tensor], int], torch.Tensor]] = {
    # The first tensor full, the others broadcast into it.
    "broadcast": lambda new, k: new((3, 4, 5) if k == 0 else ((4, 1), (5,))[(k - 1) % 2]),
    "transposed": lambda new, k: new((7, 5)).t(),
    "sliced": lambda new, k: new((5, 14))[:, ::2],
    "channels_last": lambda new, k: new((2, 3, 4, 5)).contiguous(memory_format=torch.channels_last),
    "zero-size": lambda new, k: new((0, 5)),
    "size-1": lambda new, k: new((1, 1)),
    "odd": lambda new, k: new((3, 7, 11)),
}


# Extra layouts per dtype: all in fp32; in bf16 the ones most likely to
# differ by element size (vector widths, tails); fp16 has bf16's element size
# and gets OpInfo samples only (the sweep's time is mostly NVRTC compiles).
LAYOUTS_OF = {
    torch.float32: tuple(_LAYOUTS),
    torch.bfloat16: ("broadcast", "sliced", "odd"),
    torch.int32: ("broadcast", "sliced"),
    torch.bool: ("broadcast", "sliced"),
}


def relayout(tensors: list[torch.Tensor], layout: str, seed: int = 0) -> list[torch.Tensor]:
    """The sample's tensors in another layout. 0-dim tensors beside others
    stay as they are (they may have to be scalars); all-0-dim samples move."""
    g = torch.Generator().manual_seed(seed)
    keep_scalars = any(t.dim() > 0 for t in tensors)
    out: list[torch.Tensor] = []
    for t in tensors:
        if t.dim() == 0 and keep_scalars:
            out.append(t)
        else:
            k = len(out) - sum(o.dim() == 0 for o in out)  # which moved tensor this is
            out.append(_LAYOUTS[layout](lambda shape, t=t: _values_like(t, shape, g), k))
    return out


# --- one case -------------------------------------------------------------


class NotApplicable(Exception):
    """Eager itself refuses the call, or it leaves the GPU: not a case."""


def _check_same(got: Any, expected: Any) -> None:
    got_leaves, expected_leaves = tree_leaves(got), tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves), (len(got_leaves), len(expected_leaves))
    for g, e in zip(got_leaves, expected_leaves, strict=True):
        if isinstance(e, torch.Tensor):
            assert isinstance(g, torch.Tensor), type(g)
            torch.testing.assert_close(g, e, equal_nan=True)  # per-dtype default tolerances
        else:
            assert g == e, (g, e)


def run_case(call: Call, case: Case) -> Case:
    """Eager and compiled on separate copies; fills case.ran_generated,
    case.error and case.why_not. Raises NotApplicable when eager cannot run
    the call."""
    eager_inputs, compiled_inputs = _copy(call.tensors), _copy(call.tensors)
    try:
        expected = call.run(*eager_inputs)
    except Exception as error:
        raise NotApplicable(str(error)) from error
    outputs = [e for e in tree_leaves(expected) if isinstance(e, torch.Tensor)]
    if not outputs or any(e.device.type != DEVICE for e in outputs):
        raise NotApplicable(f"no {DEVICE} tensor output")
    # Traced with our decomposition table and compiled through the same entry
    # point aot_autograd calls (compile_aten_graph), without dynamo: a dynamo
    # compile per case would cost seconds, and what the backend sees is the
    # same core-ATen graph.
    records: list[Any] = []
    try:
        gm = make_fx(call.run, decomposition_table=_TABLE, tracing_mode="fake")(*compiled_inputs)
        with collecting() as records:  # compiling publishes the record
            compiled = compile_aten_graph(
                gm, compiled_inputs, name=f"sweep.{case.label}", kind="inference", options=_OPTIONS
            )
            got = compiled(list(compiled_inputs))
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        got, expected = tree_leaves(got), tree_leaves(expected)
        case.ran_generated = generated_ops(records)
        _check_same(got, expected)
        _check_same(compiled_inputs, eager_inputs)  # same mutations (none, for these ops)
    except Exception as error:  # a mismatch, or the backend raised (strict mode)
        lines = str(error).strip().splitlines()
        case.error = f"{type(error).__name__}: {' | '.join(lines[:4])}"
    if not case.error and not case.exercised:
        case.why_not = why_not_generated(records, case.targets)
    return case


# --- the sweep ------------------------------------------------------------


def _dtypes(info: Any) -> list[torch.dtype]:
    floats = [d for d in FLOAT_DTYPES if info.supports_dtype(d, DEVICE)]
    return floats or [d for d in OTHER_DTYPES if info.supports_dtype(d, DEVICE)]


def _samples(info: Any, dtype: torch.dtype) -> Iterator[Any]:
    torch.manual_seed(0)  # sample_inputs draws from the global generator
    for sample in info.sample_inputs(DEVICE, dtype, requires_grad=False):
        if _is_flat(sample):
            yield sample


def _direct_overloads(targets: list[str]) -> dict[str, Any]:
    """The torch.ops callables of the target overloads (for overloads the
    public API never produces, e.g. aten::add.Scalar)."""
    out = {}
    for name in targets:
        namespace, rest = name.split("::")
        packet, overload = rest.split(".")
        out[name] = getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    return out


def _better_template(template: tuple[Call, Any] | None, call: Call) -> bool:
    """The extra layouts start from the first exercised call, or a later one
    with a tensor of rank > 0 (binary ops' first samples are all 0-dim)."""
    if template is None:
        return True
    ranked = lambda c: any(t.dim() > 0 for t in c.tensors)  # noqa: E731
    return not ranked(template[0]) and ranked(call)


def sweep_opinfo(info: Any, targets: list[str]) -> list[Case]:
    """Every case of one OpInfo, logged in LOG."""
    ident = opinfo_id(info)
    cases: list[Case] = []
    # Overloads aot_autograd decomposes never reach the backend: the samples
    # then test the decomposition's ops, and any table op counts.
    reachable = tuple(t for t in targets if t not in UNREACHABLE)

    def record(call: Call, label: str, dtype: torch.dtype, wanted: tuple[str, ...]) -> Case | None:
        case = Case(ident, label, str(dtype).removeprefix("torch."), wanted)
        try:
            run_case(call, case)
        except NotApplicable:
            return None
        cases.append(case)
        LOG.cases.append(case)
        return case

    for dtype in _dtypes(info):
        exercised: set[str] = set()
        template: tuple[Call, tuple[str, ...]] | None = None
        samples = []
        for n, sample in enumerate(_samples(info, dtype)):
            if n >= SAMPLES:
                break
            samples.append(sample)
            call = Call(info.op, (sample.input, *sample.args), dict(sample.kwargs))
            case = record(call, f"sample {n}", dtype, reachable)
            if case is None or not case.exercised:
                continue
            hit = tuple(sorted(case.ran_generated & set(reachable))) if reachable else ()
            exercised.update(hit)
            if _better_template(template, call):
                template = (call, hit)
        # Overloads the public API does not produce (e.g. aten::add.Scalar
        # for torch.add(x, 2)): call them directly with the same samples.
        for name, overload in _direct_overloads(list(reachable)).items():
            for n, sample in enumerate(samples):
                if name in exercised:
                    break
                args, kwargs = numbers_for_scalar_arguments(
                    overload, (sample.input, *sample.args), sample.kwargs
                )
                call = Call(overload, tuple(args), kwargs)
                case = record(call, f"direct {name} sample {n}", dtype, (name,))
                if case is not None and case.exercised:
                    exercised.add(name)
                    if _better_template(template, call):
                        template = (call, (name,))
        if template is None:
            continue
        call, wanted = template
        for layout in LAYOUTS_OF.get(dtype, ()):
            record(call.with_tensors(relayout(call.tensors, layout)), layout, dtype, wanted)
    LOG.finished_opinfos.add(ident)
    return cases


@pytest.mark.parametrize("ident", sorted(OPINFOS))
def test_opinfo_samples_match_eager(ident: str) -> None:
    info, targets = OPINFOS[ident]
    cases = sweep_opinfo(info, targets)
    failed = [f"[{c.dtype}] {c.label}: {c.error}" for c in cases if c.error]
    assert not failed, f"{ident}: {len(failed)} of {len(cases)} cases failed:\n" + "\n".join(failed)


def test_every_reachable_overload_ran_in_a_generated_kernel() -> None:
    """Runs last (file order): the table's claims against what the sweep saw."""
    if not LOG.finished_opinfos:
        pytest.skip("no OpInfo of the sweep ran (deselected?)")
    missing = LOG.never_exercised(MATCHED_IDS, UNREACHABLE)
    assert not missing, (
        "overloads of the pointwise lowering table that no OpInfo case ran in a generated "
        f"kernel: {missing}\n" + LOG.summary(MATCHED_IDS, UNREACHABLE)
    )
