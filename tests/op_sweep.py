"""Bookkeeping of the OpInfo sweep of the pointwise CUDA path.

tests/gpu/test_op_sweep.py runs OpInfo samples through torch.compile with
generated kernels on and compares with eager; this module holds what needs
no GPU, so that tests/unit/test_op_sweep_bookkeeping.py can check it on CPU:
which OpInfos cover which overload of the lowering table, which overloads
torch.compile can never hand to the backend (decomposed by aot_autograd
first), how a case's graph records say which ops ran in generated kernels,
and the summary printed at the end. docs/contributing.md describes the sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# OpInfos not named after the ATen packet (or under nn.functional/special).
OPINFO_ALIASES: dict[str, tuple[str, ...]] = {
    "_to_copy": ("to",),
}
# Where the packet name of an overload may appear as an OpInfo name.
_NAMESPACES = ("", "nn.functional.", "special.")


def packet_of(overload: str) -> str:
    """'aten::div.Tensor_mode' -> 'div'."""
    return overload.split("::", 1)[-1].split(".", 1)[0]


def opinfo_names_for(overload: str) -> tuple[str, ...]:
    """The OpInfo names that may cover `overload`, most likely first."""
    if not overload.startswith("aten::"):
        return ()  # prims:: and friends have no entry in op_db
    packet = packet_of(overload)
    return OPINFO_ALIASES.get(packet, tuple(prefix + packet for prefix in _NAMESPACES))


def match_opinfos(overloads: Iterable[str], opinfos: Sequence[Any]) -> dict[str, list[Any]]:
    """Each overload -> the OpInfos (every variant) whose name covers it; [] for none."""
    by_name: dict[str, list[Any]] = {}
    for info in opinfos:
        by_name.setdefault(info.name, []).append(info)
    matched = {}
    for overload in overloads:
        for name in opinfo_names_for(overload):
            if name in by_name:
                matched[overload] = list(by_name[name])
                break
        else:
            matched[overload] = []
    return matched


def opinfo_id(info: Any) -> str:
    """'div.floor_rounding', 'exp': the test id of one OpInfo."""
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def overload_name(op: Any) -> str:
    """torch.ops.aten.add.Tensor -> 'aten::add.Tensor' (the IR's spelling)."""
    return f"{op.namespace}::{op._opname}.{op._overloadname}"


def numbers_for_scalar_arguments(
    overload: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """For calling an overload that takes numbers (aten::add.Scalar) with a
    sample made for the tensor overload: each non-empty tensor given for a
    `number` argument becomes its first element as a Python number."""
    args, kwargs = list(args), dict(kwargs)

    def number(value: Any) -> Any:
        if hasattr(value, "numel") and value.numel() > 0:
            return value.reshape(-1)[0].item()
        return value

    for index, argument in enumerate(overload._schema.arguments):
        if "number" not in str(argument.type):
            continue
        if not argument.kwarg_only and index < len(args):
            args[index] = number(args[index])
        elif argument.name in kwargs:
            kwargs[argument.name] = number(kwargs[argument.name])
    return args, kwargs


def decomposed_overloads(overloads: Iterable[str], table: Mapping[Any, Any]) -> set[str]:
    """The overloads aot_autograd decomposes before lowering (mybackend's table):
    torch.compile never hands them to the backend, so no sample can exercise them."""
    names = {overload_name(op) for op in table if hasattr(op, "_overloadname")}
    return {o for o in overloads if o in names}


def generated_ops(records: Sequence[Any]) -> set[str]:
    """The ops that ran inside generated kernels in one call of a compiled function.

    A graph counts only if it ran every pointwise group it compiled as a
    generated kernel and none fell back to ATen on that call, so an op is
    never credited for a launch of some other group.
    """
    ops: set[str] = set()
    for record in records:
        if record.core_report is None or record.compiled is None:
            continue
        stats = record.compiled.stats()
        report = record.core_report
        groups = [k for k in report["kernels"] if k["kind"] == "pointwise" and k.get("compiled")]
        ran = stats["generated_kernels_run"]
        if not groups or stats["generated_kernel_fallbacks"] != 0 or ran < len(groups):
            continue
        node_ops = {node["id"]: node["op"] for node in report["nodes"]}
        for group in groups:
            ops.update(node_ops[n] for n in group["nodes"])
    return ops


def why_not_generated(records: Sequence[Any], targets: Sequence[str]) -> str:
    """For a case that was not exercised: the planner's or runtime's reasons
    for the kernel groups holding a target op (any op if targets is empty)."""
    reasons: list[str] = []
    for record in records:
        if record.core_report is None:
            reasons.append(f"graph not compiled: {record.fallback_reason}")
            continue
        node_ops = {node["id"]: node["op"] for node in record.core_report["nodes"]}
        for group in record.core_report["kernels"]:
            ops = {node_ops[n] for n in group["nodes"]}
            if targets and not ops & set(targets):
                continue
            reason = group.get("problem") or group["why"]
            if reason and reason not in reasons:
                reasons.append(reason)
        if record.compiled is not None:
            stats = record.compiled.stats()
            if stats["generated_kernel_fallbacks"]:
                reasons.append(
                    f"{stats['generated_kernel_fallbacks']} group(s) fell back at run time"
                )
    return "; ".join(reasons) or "the graph has no kernel group for the op"


@dataclasses.dataclass
class Case:
    """One compiled-vs-eager run: an OpInfo sample or an extra layout."""

    opinfo: str  # opinfo_id
    label: str  # e.g. "sample 2", "channels_last", "direct aten::add.Scalar sample 0"
    dtype: str
    # The table overloads the case is meant to run; empty: any of the table
    # (OpInfos whose own overloads are decomposed before lowering).
    targets: tuple[str, ...]
    ran_generated: set[str] = dataclasses.field(default_factory=set)
    error: str = ""  # mismatch against eager, or the backend raised
    why_not: str = ""  # for cases not exercised: what the report says

    @property
    def exercised(self) -> bool:
        if not self.targets:
            return bool(self.ran_generated)
        return bool(self.ran_generated & set(self.targets))


@dataclasses.dataclass
class SweepLog:
    """Every case of a sweep, and which OpInfos ran to completion."""

    cases: list[Case] = dataclasses.field(default_factory=list)
    finished_opinfos: set[str] = dataclasses.field(default_factory=set)

    def exercised_overloads(self) -> set[str]:
        return {op for case in self.cases if not case.error for op in case.ran_generated}

    def not_exercised(self) -> list[Case]:
        return [c for c in self.cases if not c.error and not c.exercised]

    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.error]

    def never_exercised(
        self, matched: Mapping[str, Sequence[str]], unreachable: set[str]
    ) -> list[str]:
        """Overloads of the table that had OpInfos, all of which ran to the end,
        and that no case ran in a generated kernel (unreachable ones excepted)."""
        done = self.exercised_overloads()
        return sorted(
            overload
            for overload, ids in matched.items()
            if ids
            and overload not in unreachable
            and overload not in done
            and all(i in self.finished_opinfos for i in ids)
        )

    def summary(
        self, matched: Mapping[str, Sequence[str]], unreachable: set[str], limit: int = 60
    ) -> str:
        done = self.exercised_overloads()
        lines = [
            f"op sweep: {len(self.cases)} cases, {len(self.failures())} failed, "
            f"{len(self.not_exercised())} not exercised (ran as ATen calls); "
            f"{len(done & set(matched))}/{len(matched)} table overloads ran in generated kernels"
        ]
        missing = self.never_exercised(matched, unreachable)
        if missing:
            lines.append("never exercised: " + ", ".join(missing))
        if unreachable:
            lines.append("decomposed before lowering: " + ", ".join(sorted(unreachable)))
        without = sorted(o for o, ids in matched.items() if not ids)
        if without:
            lines.append("no OpInfo: " + ", ".join(without))
        skipped = self.not_exercised()
        for case in skipped[:limit]:
            lines.append(
                f"  not exercised: {case.opinfo} [{case.dtype}] {case.label}: {case.why_not}"
            )
        if len(skipped) > limit:
            lines.append(f"  ... and {len(skipped) - limit} more")
        for case in self.failures()[:limit]:
            lines.append(f"  FAILED: {case.opinfo} [{case.dtype}] {case.label}: {case.error}")
        return "\n".join(lines)
