"""The backend's options: one frozen, typed object.

``torch.compile(m, backend="mybackend", options={...})`` and ``mode=`` both
end here. Every field has a type, a default, help text and a flag saying
whether it changes generated code (and so belongs in cache keys). Modes are
presets of fields, so anything a mode sets can also be set as an option.
docs/options.md is tested against this file.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

# mybackend/__init__.py imports _C before anything that imports this module,
# so this import never closes a circle (python3 -c "import mybackend.options").
from mybackend import _C

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# The names disabled_op_classes accepts: op_class_name() in
# src_cpp/capability/registry.cpp, in the order of its OpClass enum. The
# bindings only expose the classes that have ops (supported_ops()), and
# "other" has none, so the list lives here; tests/unit/test_options.py checks
# it against both the extension and that file.
OP_CLASSES = (
    "pointwise",
    "reduction",
    "normalization",
    "matmul",
    "convolution",
    "attention",
    "view",
    "other",
)


def _field(default: Any, help: str, affects_codegen: bool = False) -> Any:
    return dataclasses.field(
        default=default, metadata={"help": help, "affects_codegen": affects_codegen}
    )


@dataclasses.dataclass(frozen=True)
class Options:
    """Options of the mybackend compiler (see docs/options.md)."""

    strict: bool = _field(
        False,
        "Raise compile and runtime failures instead of warning once and running the graph eagerly.",
    )
    min_partition_size: int = _field(
        1, "Partitions with fewer nodes run their nodes as eager ATen calls.", True
    )
    allow_single_node_partition: bool = _field(True, "Keep partitions of a single node.", True)
    disabled_ops: tuple[str, ...] = _field(
        (),
        "ATen overloads (e.g. 'aten::mul.Tensor') the core must not claim; they run "
        "as eager ATen calls. For bisecting a bad kernel. Each must be a name that "
        "mybackend.supported_ops() lists (docs/ops.md).",
        True,
    )
    disabled_op_classes: tuple[str, ...] = _field(
        (),
        f"Op classes the core must not claim: {', '.join(OP_CLASSES)}.",
        True,
    )
    disabled_passes: tuple[str, ...] = _field(
        (),
        "mybackend's graph passes to skip, by name (docs/architecture.md lists them; "
        "explain() shows the ones that ran). For bisecting a rewrite and for A/B runs: "
        "a skipped pass leaves a correct graph, only a slower one. The environment "
        "variable MYBACKEND_DISABLED_PASSES (a comma list, read at each compile) adds "
        "to it, for same-process A/B runs (benchmarks.ab_env).",
    )
    cuda_graphs: bool = _field(
        False,
        "Capture each CUDA graph of static shape once and replay it (mode "
        "'reduce-overhead' turns it on). Graphs on the CPU are never captured.",
    )
    generated_kernels: bool = _field(
        True,
        "Fuse elementwise ops, reductions with their elementwise prologue/epilogue, "
        "softmax/layer-norm/RMS-norm, and 2-d max pools and their backward with their "
        "elementwise prologue of CUDA partitions into NVRTC-generated kernels (CUDA engine I). "
        "False runs those nodes as ATen calls.",
        True,
    )
    channels_last: bool = _field(
        True,
        "Run 4-D convolutions in channels-last layout, decided once per graph (for training, "
        "once on the joint forward-backward graph): inputs and weights converted before "
        "their first convolution, outputs returned in eager's strides (Note [Channels-last "
        "planning]). Convolutions whose layout copies would cost more than the layout gains "
        "keep eager's layout in inference graphs (Note [Layout regions pay for their copies]).",
        True,
    )
    channels_last_everywhere: bool = _field(
        False,
        "With channels_last, plan every 4-D convolution, also those whose copies into and "
        "out of channels-last cost more than they gain (Note [Layout regions pay for their "
        "copies]). For tests of the plan and for measuring it.",
        True,
    )
    pad_matmuls: bool = _field(
        True,
        "Pad 16-bit CUDA matrix products whose leading dimensions are not multiples of 16 "
        "bytes (GPT-2's 50257-word output layer) so cuBLASLt runs its tensor-core kernels; "
        "inference graphs may then return outputs with padded row strides, as Inductor's "
        "do; training pads the joint forward-backward graph, so saved tensors keep them "
        "(Note [Aligned matrix products]).",
        True,
    )
    fused_cross_entropy: bool = _field(
        True,
        "Run F.cross_entropy over CUDA [rows, classes] logits whose math is fp32 (fp32 "
        "logits, or bf16/fp16 under autocast) as two fused kernels that save only the "
        "logits and one log-sum-exp per row for the backward, instead of an fp32 "
        "log-softmax (Note [Fused cross-entropy]).",
        True,
    )
    hoist_parameter_work: bool = _field(
        False,
        "Opt-in, like Inductor's freezing: in inference graphs, compute what reads only "
        "parameters and buffers (weight layout copies, batch-norm scale and shift, weight "
        "casts) once per parameter version instead of on every call; the results stay in "
        "memory. A parameter's version changes with assignments, optimizer steps, "
        "load_state_dict and in-place ops on it, but not with in-place edits through "
        "``p.data``, which then leave stale results: off by default for that reason "
        "(Note [Hoisted parameter work]). Constants, which read no input, are hoisted "
        "either way (Note [Constants are always hoisted]).",
        True,
    )
    min_fused_nodes: int = _field(
        2,
        "Smallest elementwise group that becomes a generated kernel; smaller groups run "
        "as ATen calls (a lone op gains nothing from fusion; 1 tests kernels op by op). "
        "Lone dtype casts and lone column reductions are generated at any setting.",
        True,
    )
    kernel_cache_dir: str | None = _field(
        None,
        "Folder of the disk cache of generated kernels (created with mode 0700); 'off' "
        "or '' keeps them in this process's memory only. None: MYBACKEND_CACHE_DIR (a "
        "folder, or 0/off/empty for memory only), else $XDG_CACHE_HOME/mybackend, else "
        "~/.cache/mybackend.",
    )
    cublaslt: bool = _field(
        True,
        "Run matrix products (mm, addmm, bmm, baddbmm) of CUDA partitions as cuBLASLt calls "
        "with fused epilogues (bias, ReLU, tanh-GELU, bias gradient, a residual sum as C; "
        "CUDA engine II). Off: they run as ATen calls.",
        True,
    )
    cudnn_attention: bool = _field(
        False,
        "Experimental, off by default: also run the aten flash and memory-efficient SDPA "
        "ops (forward and backward) and the matmul-softmax-matmul pattern of inference graphs "
        "of CUDA partitions as cuDNN SDPA graphs; where cuDNN cannot, the aten kernel runs. "
        "Off because its forward measured slower than eager's flash kernel on an H100 "
        "(2026-11-22). torch's own cuDNN SDPA ops (what sdpa picks on Hopper when it can) run "
        "as mybackend's cuDNN graphs either way; disabled_op_classes=('attention',) leaves "
        "all attention to aten. A bias over a key length that is not a multiple of 8 stays "
        "with aten (docs/design/0009-attention.md).",
        True,
    )
    cudnn: bool = _field(
        True,
        "Run convolutions of CUDA partitions (forward, with bias, inference batch norm, "
        "residual add and ReLU fused, and backward) as cuDNN frontend graphs with plans cached "
        "per shape signature (CUDA engine II). Off: they run as ATen calls.",
        True,
    )
    max_cuda_graphs: int = _field(
        8, "Most input signatures one compiled graph captures; later ones run uncaptured."
    )
    launch_tuning: tuple[tuple[str, int], ...] = _field(
        (),
        "Launch parameters of generated kernels, as a dict of knob to value (e.g. "
        "{'pw_block': 256, 'norm_vec_per_thread': 2}): pw_block, pw_vec_per_thread, "
        "pw_blocks_per_sm, pw_coalesce_dims, pw_fast_divisors, norm_block, norm_vec_per_thread, "
        "norm_blocks_per_sm, norm_wide_warps_per_sm, softmax_block, softmax_blocks_per_sm, "
        "bn_row_unroll, bn_blocks_per_sm, bn_chunk_passes, bn_min_blocks, bn_max_lanes. A "
        "knob not given takes its MYBACKEND_<KNOB> environment variable, else its default "
        "(Note [Launch tuning knobs]). For sweeps on a GPU; part of each kernel's cache key.",
        True,
    )
    autotune: bool = _field(
        False,
        "Pick library algorithms by timing instead of by heuristic: each cuBLASLt product "
        "times the heuristic's top candidates once per shape, on its first run outside a "
        "CUDA-graph capture, and keeps the fastest (mode 'max-autotune' turns it on).",
        True,
    )
    eager_floor: bool = _field(
        True,
        "Time each compiled CUDA graph against the user's graph run eagerly (a training "
        "call with its backward) on its first calls (alternating, about 16 calls) and run "
        "the faster from then on, so that a compiled graph is never slower than eager; "
        "the choice is kept in the kernel cache folder "
        "for later processes; and time each cuDNN convolution, tiled transposing copy "
        "and cast group against its ATen form on its first call, running the faster, that "
        "choice kept there too "
        "(docs/design/0010-eager-floor.md).",
    )
    warm_start: bool = _field(
        False,
        "Keep each compiled graph (the lowered IR, options and core settings) in torch's "
        "AOTAutograd cache (TORCHINDUCTOR_CACHE_DIR), so that a new process running the same "
        "model skips aot_autograd's trace and mybackend's lowering; any change of graph, input "
        "metadata, options, torch, mybackend or device misses. Off with dump_dir, "
        "accuracy_check or background_compile, which need the compile itself "
        "(docs/warm-start.md).",
    )
    dump_dir: str | None = _field(
        None,
        "Folder to write each graph's stage outputs (ATen graph, IR, partition plan, "
        "kernels, report, partition map) and, on a compile failure, a reproducer to "
        "(MYBACKEND_DUMP_DIR is the environment default).",
    )
    accuracy_check: bool = _field(
        False,
        "On each compiled graph's first call, run every partition through the core beside "
        "its eager ATen nodes on the real inputs and warn when the worst relative error "
        "exceeds the dtype's tolerance. Slow: for debugging only.",
    )
    background_compile: bool = _field(
        False,
        "Lower and compile each graph on a worker thread; its calls run eagerly until the "
        "compiled version is ready, then switch to it without blocking the caller.",
    )

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_user(
        cls, mode: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Options:
        """Validates torch.compile's ``mode`` and ``options`` into an Options.

        Raises TypeError for a value of the wrong type and ValueError for an
        unknown option, mode, op or op class; each message names the bad value
        and, where there is one, the nearest valid one.
        """
        values = dict(mode_preset(mode))
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            # A list of pairs would otherwise fail deep inside with
            # "'list' object has no attribute 'items'".
            raise TypeError(
                f"mybackend: options must be a dict of option names to values "
                f"(e.g. options={{'strict': True}}), got {type(options).__name__}"
            )
        for key, value in options.items():
            values[key] = _validated(key, value)
        return cls(**values)

    def dump_folder(self) -> str | None:
        """Where dumps go: the dump_dir option, else MYBACKEND_DUMP_DIR, else nowhere."""
        return self.dump_dir or os.environ.get("MYBACKEND_DUMP_DIR") or None

    def kernel_cache_location(self) -> str | None:
        """kernel_cache_dir for the core: None (the environment decides), "" (no disk
        cache) or an absolute path (relative ones are taken from the working folder
        now, so that a later chdir does not move the cache)."""
        if self.kernel_cache_dir is None:
            return None
        if self.kernel_cache_dir in ("", "off"):
            return ""
        return os.path.abspath(os.path.expanduser(self.kernel_cache_dir))

    def cache_root(self) -> str | None:
        """The folder the kernel cache (and the eager floor's choices) use, as
        the core resolves it, or None without a disk cache."""
        return _C.kernel_cache_root(self.kernel_cache_location())

    def kernel_cache_problem(self) -> str | None:
        """Why the disk cache the user chose (this option, else
        MYBACKEND_CACHE_DIR) is unusable, or None. The core then keeps
        kernels in memory only and says so only in its debug trace; asked
        here (the core's own check, which creates the folder when it can),
        the backend can warn. The default location is not checked: the user
        did not choose it."""
        root = self.kernel_cache_location()
        if root is None:
            root = os.environ.get("MYBACKEND_CACHE_DIR")
            if root is None or root in ("", "0", "off"):
                return None
            root = os.path.abspath(root)
        elif root == "":
            return None
        why = _C.kernel_cache_problem(root)
        return None if why is None else f"kernel cache folder {root}: {why}"

    def user_dict(self) -> dict[str, Any]:
        """The fields that differ from their defaults (what a user would pass)."""
        return {
            f.name: list(value) if isinstance(value, tuple) else value
            for f in dataclasses.fields(self)
            if (value := getattr(self, f.name)) != f.default
        }

    def _disabled_ops(self) -> list[str]:
        # With cudnn_attention off, the aten flash and memory-efficient SDPA
        # ops stay out of partitions and run as single eager calls, as before
        # the attention engine; the aten cuDNN ones are planned either way,
        # since their kernels are cuDNN's already (docs/design/0009-attention.md).
        ops = list(self.disabled_ops)
        if not self.cudnn_attention:
            ops += [op for op in _NON_CUDNN_SDPA_OPS if op not in ops]
        return ops

    def core_options(self, static_inputs: Sequence[int] = ()) -> dict[str, Any]:
        """The subset the C++ core reads (see bindings/compile.cpp)."""
        return {
            "cuda_graphs": self.cuda_graphs,
            "max_cuda_graphs": self.max_cuda_graphs,
            "generated_kernels": self.generated_kernels,
            "min_fused_nodes": self.min_fused_nodes,
            "kernel_cache_dir": self.kernel_cache_location(),
            "cublaslt": self.cublaslt,
            "autotune": self.autotune,
            "cudnn_attention": self.cudnn_attention,
            "cudnn": self.cudnn,
            "static_inputs": list(static_inputs),
            "disabled_ops": self._disabled_ops(),
            "disabled_op_classes": list(self.disabled_op_classes),
            "min_partition_size": self.min_partition_size,
            "allow_single_node_partition": self.allow_single_node_partition,
            "launch_tuning": dict(self.launch_tuning),
            # Note [A group is timed against its ATen form] (runtime/group_floor.h)
            "group_floor": self.eager_floor,
            # Note [Group floor choices on disk]: a rebuilt core may choose otherwise
            "group_floor_context": f"torch {torch.__version__}; extension {extension_build()}",
        }


_NON_CUDNN_SDPA_OPS = tuple(
    f"aten::_scaled_dot_product_{kind}.default"
    for kind in (
        "flash_attention",
        "flash_attention_backward",
        "efficient_attention",
        "efficient_attention_backward",
        "flash_attention_for_cpu",
        "flash_attention_for_cpu_backward",
    )
)


def mode_preset(mode: str | None) -> dict[str, Any]:
    """The option values a torch.compile mode stands for."""
    if mode is None or mode == "default":
        return {}
    if mode == "reduce-overhead":
        return {"cuda_graphs": True}
    if mode == "max-autotune":
        return {"cuda_graphs": True, "autotune": True}
    if mode == "max-autotune-no-cudagraphs":
        return {"autotune": True}
    raise ValueError(f"mybackend: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")


# How error messages spell each field type (the keys are the annotations as
# strings, which is what dataclasses.fields() holds under `from __future__
# import annotations`).
_TYPE_WORDS = {
    "bool": "bool",
    "int": "int >= 1",
    "tuple[str, ...]": "tuple[str, ...] (a list or tuple of names)",
    "str | None": "str | None",
    "tuple[tuple[str, int], ...]": "dict[str, int] (launch tuning knob -> value)",
}
_MAX_SUGGESTIONS = 6  # a bare "add" has more overloads than a message should list


def _validated(key: object, value: Any) -> Any:
    fields = {f.name: f for f in dataclasses.fields(Options)}
    if not isinstance(key, str):
        raise TypeError(f"mybackend: option names are str, got {type(key).__name__} {key!r}")
    if key not in fields:
        hint = _did_you_mean(difflib.get_close_matches(key, fields, n=1))
        raise ValueError(
            f"mybackend: unknown option {key!r}.{hint} Valid options: {', '.join(sorted(fields))}"
        )
    expected = str(fields[key].type)  # an annotation string, as _TYPE_WORDS says
    if not _matches(expected, value):
        # _matches takes only lists and tuples for names, so that a str (a
        # sequence of str too) never reads as one-letter names; say how to
        # pass the one name it probably is.
        one = ""
        if expected == "tuple[str, ...]" and isinstance(value, str):
            one = f"; for one name write [{value!r}]"
        raise TypeError(
            f"mybackend: option {key!r} takes {_TYPE_WORDS.get(expected, expected)}, "
            f"got {type(value).__name__} {value!r}{one}"
        )
    if expected == "tuple[tuple[str, int], ...]":
        value = tuple(sorted(dict(value).items()))
    check = _ITEM_CHECKS.get(key)
    if check is not None:
        for item in value:
            check(item)
    if expected == "tuple[str, ...]":
        return tuple(value)
    return value


def _matches(expected: Any, value: Any) -> bool:
    if expected == "bool":
        return isinstance(value, bool)
    if expected == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if expected == "tuple[str, ...]":
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if expected == "str | None":
        return value is None or isinstance(value, str)
    if expected == "tuple[tuple[str, int], ...]":
        pairs = list(value.items()) if isinstance(value, Mapping) else value
        return isinstance(pairs, (list, tuple)) and all(_is_knob_pair(p) for p in pairs)
    raise AssertionError(f"Options field type {expected} has no validator")


def _is_knob_pair(pair: Any) -> bool:
    return (
        isinstance(pair, (list, tuple))
        and len(pair) == 2
        and isinstance(pair[0], str)
        and isinstance(pair[1], int)
        and not isinstance(pair[1], bool)
    )


def _did_you_mean(names: Sequence[str]) -> str:
    if not names:
        return ""
    if len(names) == 1:
        return f" Did you mean {names[0]!r}?"
    return f" Did you mean one of {', '.join(map(repr, names))}?"


def _check_op_class(name: str) -> None:
    if name not in OP_CLASSES:
        hint = _did_you_mean(difflib.get_close_matches(name, OP_CLASSES, n=1))
        raise ValueError(
            f"mybackend: option 'disabled_op_classes' got unknown op class {name!r}.{hint} "
            f"Valid op classes: {', '.join(OP_CLASSES)}."
        )


@functools.cache
def _known_ops() -> frozenset[str]:
    """The names disabled_ops accepts: every overload in the core's capability
    registry, and the SDPA ops that core_options() disables itself."""
    return frozenset(op for op, _ in _C.supported_ops()) | frozenset(_NON_CUDNN_SDPA_OPS)


def _check_op(name: str) -> None:
    # The core ignores a name it does not know, so a typo would silently
    # disable nothing: the opposite of what someone bisecting a kernel needs.
    known = _known_ops()
    if name not in known:
        hint = _did_you_mean(_nearest_ops(name, known))
        raise ValueError(
            f"mybackend: option 'disabled_ops' got {name!r}, which is not an operator the "
            f"core claims.{hint} Names are ATen overloads as mybackend.supported_ops() "
            "lists them (docs/ops.md)."
        )


def _op_name(op: str) -> str:
    """'mul' for 'aten::mul.Tensor', for 'aten.mul.Tensor' (how torch prints
    torch.ops.aten.mul.Tensor) and for a bare 'mul'."""
    name = op.split("::", 1)[1] if "::" in op else op.removeprefix("aten.")
    return name.split(".", 1)[0]


def _nearest_ops(name: str, known: frozenset[str]) -> list[str]:
    """The registry's overloads of the op ``name`` names (or of the nearest op
    name when it names none), else the nearest full names."""
    overloads: dict[str, list[str]] = {}
    for op in sorted(known):
        overloads.setdefault(_op_name(op), []).append(op)
    close = difflib.get_close_matches(_op_name(name), overloads, n=1)
    if close:
        return overloads[close[0]][:_MAX_SUGGESTIONS]
    return difflib.get_close_matches(name, sorted(known), n=3)


# Checks of each element of the options whose values are names.
def _check_launch_knob(item: Any) -> None:
    knob, value = item
    problem = _C.launch_tuning_problem(knob, value)
    if problem is not None:
        raise ValueError(f"mybackend: option 'launch_tuning': {problem}")


# The names disabled_passes accepts. mybackend/passes/pipeline.py, which
# imports this module, registers its passes' names when it is imported
# (importing the mybackend package imports it).
_PASS_NAMES: set[str] = set()


def register_pass_names(names: Iterable[str]) -> None:
    """Adds graph-pass names the option ``disabled_passes`` accepts."""
    _PASS_NAMES.update(names)


# Passes a same-process A/B run (benchmarks.ab_env) switches off without
# editing the call's options: a comma list of pass names, read at each compile.
DISABLED_PASSES_ENV = "MYBACKEND_DISABLED_PASSES"


def disabled_pass_names(options: Options) -> frozenset[str]:
    """``options.disabled_passes`` and those of $MYBACKEND_DISABLED_PASSES
    (an unknown name there raises, naming the variable)."""
    listed = [n.strip() for n in os.environ.get(DISABLED_PASSES_ENV, "").split(",") if n.strip()]
    for name in listed:
        try:
            _check_pass(name)
        except ValueError as error:
            raise ValueError(f"{DISABLED_PASSES_ENV}: {error}") from None
    return frozenset(options.disabled_passes).union(listed)


def _check_pass(name: str) -> None:
    known = sorted(_PASS_NAMES)
    if name not in known:
        hint = _did_you_mean(difflib.get_close_matches(name, known, n=1))
        raise ValueError(
            f"mybackend: option 'disabled_passes' got unknown pass {name!r}.{hint} "
            f"Valid passes: {', '.join(known)}."
        )


_ITEM_CHECKS: dict[str, Callable[[Any], None]] = {
    "disabled_passes": _check_pass,
    "disabled_ops": _check_op,
    "disabled_op_classes": _check_op_class,
    "launch_tuning": _check_launch_knob,
}


def extension_build() -> str:
    """Which build of the extension runs: its saved timing choices (the eager
    floor's, the group floor's) belong to it, since a rebuilt core may choose
    otherwise."""
    info = os.stat(_C.__file__)
    return f"{info.st_size}:{info.st_mtime_ns}"
