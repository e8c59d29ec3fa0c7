"""Warm start: compiled graphs kept across processes in torch's bundled
AOTAutogradCache (option ``warm_start``; docs/warm-start.md).

Note [Warm start]
A second process that runs the same model repeats dynamo's trace, then
aot_autograd's (metadata collection, joint trace, partition) and
mybackend's (FX passes, lowering, the core's plan), although every input
to those is the same. torch 2.11 keeps a backend's compiled forward and
backward in its AOTAutogradCache when three things hold:

- the compilers given to aot_module_simplified are
  ``SerializableAOTDispatchCompiler``s (torch/_functorch/aot_autograd.py:
  1132, the only gate besides the cache switches);
- ``torch._functorch.config.bundled_autograd_cache`` is on, so that the
  entry holds the compiled object itself (``BundledCompiledForward`` /
  ``BundledCompiledBackward`` in _aot_autograd/aot_autograd_result.py:263)
  instead of an Inductor FxGraphCache key (autograd_cache.py:1184-1211);
- that object is an ``OutputCode`` (make_entry asserts it, autograd_cache.py:
  1190) that plain pickle can write (autograd_cache.py:1072).

On a hit, aot_autograd neither traces nor calls the compilers: it unpickles
the entry and calls ``post_compile`` on each OutputCode (aot_autograd_result
.py:127), which is where WarmStartOutputCode builds the compiled graph again
from its GraphRecipe: the recorded builder calls (Note [Graph tapes]), the
constants, the options and core options, the planned ATen graph (pickled,
unpickled only if the graph must fall back to eager), and the core's plan
(Note [Saved core plans]).

The key is torch's (autograd_cache.py:602): the dynamo graph, the inputs'
metadata (dtype, shape, stride, device, requires_grad), grad mode, autocast,
functorch and inductor configs, torch's source hash, CUDA version and GPU
name. It knows nothing of the backend, so mybackend adds its own part
through ``torch.compiler.config.cache_key_tag``, which torch hashes into
every key (codecache.py:802): mybackend's version and a hash of its code
(Python and the extension), every option, and the device's compute
capability and cuDNN version. A graph compiled by Inductor or under other
options never matches.

The switches are set only around mybackend's call of aot_module_simplified
(aot_cache_settings): ``bundled_autograd_cache``, and
``force_non_lazy_backward_lowering`` so that the backward compiles, and the
entry is saved, within that call: with the lazy backward the save happens
in autograd's first backward call, outside it (runtime_wrappers.py:2894),
where the bundled switch would be off and torch would silently save
nothing. torch's own aot_compile path sets the same two switches.

Note [Unreadable entries]
An entry that does not unpickle (truncated, foreign, or WarmStartOutputCode
finding its payload's digest wrong) is skipped by torch, which tries the
next entry of the key and otherwise compiles (codecache.py:1071-1079); torch
logs a warning with a traceback for each. Within mybackend's call that log
record becomes one mybackend warning per process instead.

Note [Saved core plans]
A recipe carries the core's plan: ``CompiledGraph.plan_bytes()`` of the
compile, the planning stages' results (every node's capability decision,
the partitions, the fusion plan with each kernel group's spec) and the
planning options they were made under, as versioned bytes
(src_cpp/pipeline/plan_archive.h, Note [Plan archive]). A warm start hands
them to ``_C.compile_planned`` with the rebuilt graph and the recipe's core
options, which runs the verify, load_plan, codegen and runtime stages and
no capability check, partitioning or fusion planning; the codegen stage
emits each generated group's source from its saved spec and finds the
kernel in the kernel cache as a cold compile would. ``compile_planned``
raises ``_C.Error`` for bytes that are truncated or garbled, of another
format version, or not a plan of this graph (node and value counts,
structural hash, ids, kinds) under these planning options (a launch tuning
set through the environment included); compile_core then plans with
``_C.compile`` as a cold compile does, and the counters say which happened
(CORE_PLANS, CORE_PLAN_LOADS). Library algorithm choices (cuBLASLt, cuDNN)
are not part of the plan: they are made again on the first run.

Note [Warm-started floors]
The eager floor sits in front of dynamo's graph, outside what aot_autograd
caches (Note [Eager is the floor] in mybackend/eager_floor.py): a loaded
process calls the backend with the same dynamo graph and example inputs,
so its floor is keyed as the compiling process's was and finds the choice
file that process wrote. A recipe holds nothing of the floor.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import logging
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch.fx
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode
from torch._inductor.runtime.runtime_utils import cache_dir  # type: ignore[attr-defined]

from mybackend import _C, cache_key_details, source_keys
from mybackend._logging import get_logger, warn_once
from mybackend.compile_times import (
    CORE_PLAN_LOADS,
    CORE_PLANS,
    WARM_LOADS,
    WARM_REJECTS,
    WARM_SAVES,
    WARM_STAGE,
    count,
)
from mybackend.compiled import CompiledGraphFunction
from mybackend.lowering import LoweredGraph
from mybackend.lowering.graph_tape import GraphTape
from mybackend.options import Options
from mybackend.passes.hoist import HoistedGraphFunction, HoistedValues, HoistPlan
from mybackend.reports import GraphRecord, publish

log = get_logger("aot")

# Bumped whenever GraphRecipe changes shape: older payloads are rejected
# (and recompiled) instead of misread.
FORMAT = 1
_CODECACHE_LOGGER = "torch._inductor.codecache"  # where torch reports unreadable entries

# The dynamo graph being compiled ("graph3"): entries loaded from the cache
# are named after this process's graphs, not the process that saved them.
_graph_name: contextvars.ContextVar[str] = contextvars.ContextVar("_graph_name", default="graph")


def enabled(options: Options) -> bool:
    """Whether graphs compiled under ``options`` go through the cache. Dumps,
    the accuracy check and background compiles need the compile itself."""
    return bool(
        options.warm_start
        and not options.dump_folder()
        and not options.accuracy_check
        and not options.background_compile
    )


# --- the key ------------------------------------------------------------------


@functools.cache
def code_fingerprint() -> str:
    """A hash of mybackend's code: every .py file of the package and the
    extension. The version string alone stays the same across edits of a
    development checkout, whose entries must not outlive the code."""
    root = Path(__file__).resolve().parent  # the package: this module sits at its top
    digest = hashlib.sha256()
    files = [*sorted(root.rglob("*.py")), Path(_C.__file__).resolve()]
    for path in files:
        digest.update(str(path.relative_to(root) if path.is_relative_to(root) else path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def device_fingerprint() -> str:
    """What of the device changes the core's plan beyond what torch's key
    holds (GPU name, CUDA version): compute capability, cuDNN, the build."""
    parts = [f"cuda_build={_C.cuda_enabled()}", f"cudnn={_C.cudnn_version()}"]
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        parts.append(f"cc={props.major}.{props.minor}")
    return ",".join(parts)


def options_fingerprint(options: Options) -> str:
    """A hash of every option (any change recompiles, codegen or not)."""
    fields = sorted(dataclasses.asdict(options).items())
    return hashlib.sha256(repr(fields).encode()).hexdigest()[:24]


def package_version() -> str:
    """mybackend.__version__, read when a key is made: the package is loaded
    by then, and importing it here would close an import circle (its
    __init__ imports the backend, which imports this module)."""
    return str(getattr(sys.modules.get(__package__ or "mybackend"), "__version__", "unknown"))


def cache_key_tag(options: Options, base: str = "") -> str:
    """torch's cache_key_tag with mybackend's part appended (Note [Warm start])."""
    ours = (
        f"mybackend={package_version()}+{code_fingerprint()}"
        f";options={options_fingerprint(options)};{device_fingerprint()}"
    )
    return f"{base}|{ours}" if base else ours


@contextlib.contextmanager
def aot_cache_settings(options: Options, graph_name: str) -> Iterator[None]:
    """torch's switches for one call of aot_module_simplified (Note [Warm start])."""
    source_keys.prime()  # Note [Source keys kept]
    cache_key_details.install()  # Note [Cache-key details only when read]
    token = _graph_name.set(graph_name)
    codecache_log = logging.getLogger(_CODECACHE_LOGGER)
    unreadable = _UnreadableEntryFilter(threading.get_ident())
    codecache_log.addFilter(unreadable)
    try:
        with (
            functorch_config.patch(
                bundled_autograd_cache=True, force_non_lazy_backward_lowering=True
            ),
            torch.compiler.config.patch(  # type: ignore[attr-defined]
                cache_key_tag=cache_key_tag(options, torch.compiler.config.cache_key_tag)
            ),
        ):
            yield
    finally:
        codecache_log.removeFilter(unreadable)
        _graph_name.reset(token)


class _UnreadableEntryFilter(logging.Filter):
    """Turns torch's log of an entry it could not unpickle into one mybackend
    warning (Note [Unreadable entries]). Only this thread's records: another
    thread's compile (Inductor's, say) keeps torch's own log."""

    def __init__(self, thread: int) -> None:
        super().__init__()
        self._thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread != self._thread or "unable to load compiled graph" not in str(record.msg):
            return True
        error = record.exc_info[1] if record.exc_info else None
        reason = f"{type(error).__name__}: {error}" if error is not None else "unreadable"
        warn_unreadable(reason)
        return False


def warn_unreadable(reason: str) -> None:
    """Counts a rejected entry and warns once per process (Note [Unreadable entries])."""
    count(WARM_REJECTS)
    warn_once(
        "warm-start:unreadable",
        f"mybackend: a warm-start cache entry under {cache_dir()}/aotautograd could not be "
        f"read ({reason}); it is ignored and the graph compiles. Deleting that folder "
        "removes it.",
    )


# --- what an entry holds --------------------------------------------------------


class RejectedEntry(Exception):
    """A payload that is not this format's, or whose digest is wrong."""


@dataclasses.dataclass
class GraphRecipe:
    """What building one compiled ATen graph again needs, in any process."""

    kind: str  # "inference", "forward" or "backward"
    tape: GraphTape  # the lowered IR (Note [Graph tapes])
    constants: list[torch.Tensor]  # appended to every call's inputs
    core_options: dict[str, Any]  # what _C.compile read, static inputs included
    options: Options
    eager: bytes  # the planned ATen GraphModule, pickled: the runtime fallback
    # The hoisted parameter work: its prepare graph (pickled) and the
    # positions of the inputs it reads (Note [Hoisted parameter work]).
    hoist_prepare: bytes | None = None
    hoist_positions: list[int] = dataclasses.field(default_factory=list)
    plan: bytes | None = None  # Note [Saved core plans]

    def build(self, name: str) -> Callable[[list[Any]], Any]:
        """The compiled graph this recipe describes, published as a record."""
        start = time.perf_counter()
        graph = self.tape.replay()
        rebuilt = time.perf_counter() - start
        core = compile_core(graph, self.core_options, self.plan)
        lowered = LoweredGraph(graph, self.constants, {}, self.tape)
        eager = DeferredGraphModule(self.eager)
        ir_text = graph.to_text(True)
        compiled = CompiledGraphFunction(name, lowered, core, eager, self.options)
        stage_times = [(WARM_STAGE, rebuilt), *core.stage_times()]
        record = GraphRecord(name, self.kind, ir_text, core.report, stage_times, compiled=compiled)
        compiled.record = record
        publish(record)
        if self.hoist_prepare is None:
            return compiled
        prepare = pickle.loads(self.hoist_prepare)
        return HoistedGraphFunction(compiled, HoistedValues(prepare, self.hoist_positions))


@dataclasses.dataclass
class CompiledParts:
    """What the compiler made of one ATen graph, as a recipe needs it."""

    kind: str  # "inference", "forward" or "backward"
    lowered: LoweredGraph
    core: Any  # _C.CompiledGraph
    core_options: dict[str, Any]  # what _C.compile read
    planned: torch.fx.GraphModule  # the graph lowered, after the per-graph passes
    hoist: HoistPlan | None


def recipe_for(parts: CompiledParts, options: Options) -> GraphRecipe | str:
    """The recipe of a graph just compiled, or why it cannot have one (never
    raises: a graph that cannot be kept still runs)."""
    try:
        return _recipe_for(parts, options)
    except Exception as error:
        return f"{type(error).__name__}: {error}"


def _recipe_for(parts: CompiledParts, options: Options) -> GraphRecipe | str:
    lowered, hoist = parts.lowered, parts.hoist
    if lowered.tape is None:
        return "its IR was not recorded"
    if lowered.python_nodes:
        # Their callables hold FX nodes; a later format may carry them.
        return f"{len(lowered.python_nodes)} nodes run in Python"
    try:
        eager = pickle_graph_module(parts.planned)
        prepare = None if hoist is None else pickle_graph_module(hoist.prepare)
    except Exception as error:  # a call target pickle cannot name, say
        return f"its ATen graph does not pickle ({type(error).__name__}: {error})"
    return GraphRecipe(
        kind=parts.kind,
        tape=lowered.tape,
        constants=list(lowered.constants),
        core_options=parts.core_options,
        options=options,
        eager=eager,
        hoist_prepare=prepare,
        hoist_positions=[] if hoist is None else list(hoist.prepare_inputs),
        plan=parts.core.plan_bytes(),  # Note [Saved core plans]
    )


def compile_core(graph: Any, core_options: dict[str, Any], plan: bytes | None = None) -> Any:
    """``_C.compile_planned`` from a saved plan, or ``_C.compile`` without one
    or when the plan is not this graph's (Note [Saved core plans]); counted
    either way."""
    if plan is not None:
        try:
            core = _C.compile_planned(graph, plan, core_options)
        except _C.Error as error:  # another core's plan: plan again
            log.debug("saved plan not used (%s); planning again", error)
        else:
            count(CORE_PLAN_LOADS)
            return core
    count(CORE_PLANS)
    return _C.compile(graph, core_options)


def pickle_graph_module(gm: torch.fx.GraphModule) -> bytes:
    """A GraphModule's code and attributes, without its meta: FakeTensors and
    dynamo's bookkeeping there do not pickle and nothing run needs them."""
    meta = gm.meta
    gm.meta = {}
    try:
        return pickle.dumps(gm)
    finally:
        gm.meta = meta


class DeferredGraphModule:
    """A pickled GraphModule, unpickled on its first call: the eager fallback
    runs only when the compiled graph fails, and unpickling re-traces its code."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._gm: torch.fx.GraphModule | None = None
        self._lock = threading.Lock()

    def module(self) -> torch.fx.GraphModule:
        with self._lock:
            if self._gm is None:
                self._gm = pickle.loads(self._data)
            return self._gm

    def __call__(self, *args: Any) -> Any:
        return self.module()(*args)


# --- the object in torch's cache ------------------------------------------------


# Note [Boxed on the instance]
# aot_autograd calls a compiled graph with one list (boxed) when the callable
# has `_boxed_call` set. On a cache hit the backward comes back wrapped in
# torch._dynamo.disable (aot_autograd_result.py:291), whose functools.wraps
# copies the instance's __dict__ onto the wrapper, not its class's
# attributes: set on the class, the flag is lost and the backward is called
# with one argument per input.
class WarmStartOutputCode(OutputCode):
    """What mybackend's compilers hand aot_autograd under warm start: the
    compiled graph (called through), and its recipe for the cache.

    Pickled, it holds only the recipe's bytes and their digest; post_compile
    builds the compiled graph from them in the loading process."""

    def __init__(
        self,
        fn: Callable[[list[Any]], Any] | None,
        recipe: GraphRecipe | str,
        kind: str,
        time_taken_ns: int = 0,
    ) -> None:
        super().__init__()
        self._boxed_call = True  # Note [Boxed on the instance]
        self.kind = kind
        self._fn = fn
        self._recipe = recipe if isinstance(recipe, GraphRecipe) else None
        self._why_not = recipe if isinstance(recipe, str) else ""
        self._payload: bytes | None = None
        # torch 2.11 reports time saved as `_time_taken_ns // 1e6` on a hit
        # (autograd_cache.py:790); OutputCode's default, None, raises there.
        self._time_taken_ns = time_taken_ns

    def __call__(self, inputs: list[Any]) -> Any:  # type: ignore[override]  # boxed: a list
        if self._fn is None:
            raise RuntimeError(f"mybackend: warm-start graph ({self.kind}) called before loading")
        return self._fn(inputs)

    def __copy__(self) -> WarmStartOutputCode:
        # torch copies the OutputCode before preparing it for the disk
        # (aot_autograd_result.py:96): share everything, serialize nothing.
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def prepare_for_serialization(self) -> None:
        """Called by torch on its copy before pickling (aot_autograd_result.py:96)."""
        self._serialized()
        self._fn = None  # the copy's; the live object keeps its graph
        self._recipe = None

    def _serialized(self) -> bytes:
        if self._payload is None:
            if self._recipe is None:
                # torch counts it as a bypass and saves nothing (autograd_cache.py:1131).
                why = f"mybackend: {self.kind} graph not kept: {self._why_not}"
                raise BypassAOTAutogradCache(why)
            self._payload = pickle.dumps(self._recipe, protocol=pickle.HIGHEST_PROTOCOL)
            count(WARM_SAVES)
        return self._payload

    def __getstate__(self) -> dict[str, Any]:
        payload = self._serialized()
        return {
            "format": FORMAT,
            "kind": self.kind,
            "time_taken_ns": self._time_taken_ns,
            "payload": payload,
            "digest": hashlib.sha256(payload).hexdigest(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Raising here makes torch skip this entry and try the key's next one
        # (Note [Unreadable entries]); a digest is cheaper than unpickling.
        payload = state.get("payload")
        if state.get("format") != FORMAT or not isinstance(payload, bytes):
            raise RejectedEntry(f"format {state.get('format')!r}, this mybackend reads {FORMAT}")
        if hashlib.sha256(payload).hexdigest() != state.get("digest"):
            raise RejectedEntry("payload digest mismatch")
        OutputCode.__init__(self)
        self._boxed_call = True  # Note [Boxed on the instance]
        self.kind = state["kind"]
        self._time_taken_ns = state["time_taken_ns"]
        self._payload = payload
        self._fn = None
        self._recipe = None
        self._why_not = ""

    def post_compile(
        self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: Any
    ) -> None:
        """Builds the compiled graph of a loaded entry (a no-op on the live one)."""
        if self._fn is not None:
            return
        assert self._payload is not None
        recipe = pickle.loads(self._payload)
        if not isinstance(recipe, GraphRecipe):
            raise RejectedEntry(f"payload holds a {type(recipe).__name__}")
        self._fn = recipe.build(f"{_graph_name.get()}.{recipe.kind}")
        count(WARM_LOADS)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        """No Triton here: mybackend's kernels live in its own disk cache."""


def serializable_compiler(
    compile_fn: Callable[[torch.fx.GraphModule, Sequence[Any]], Any], kind: str
) -> SerializableAOTDispatchCompiler:
    """Wraps one of mybackend's compilers for torch's cache (Note [Warm start])."""

    def compile_and_wrap(
        gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> WarmStartOutputCode:
        start = time.perf_counter_ns()
        fn = compile_fn(gm, example_inputs)
        recipe = getattr(fn, "warm_recipe", None)
        if recipe is None:
            recipe = "it fell back to eager or compiles in the background"
        return WarmStartOutputCode(fn, recipe, kind, time.perf_counter_ns() - start)

    return SerializableAOTDispatchCompiler(WarmStartOutputCode, compile_and_wrap)


__all__ = [
    "FORMAT",
    "CompiledParts",
    "DeferredGraphModule",
    "GraphRecipe",
    "RejectedEntry",
    "WarmStartOutputCode",
    "aot_cache_settings",
    "cache_key_tag",
    "compile_core",
    "enabled",
    "recipe_for",
    "serializable_compiler",
]
