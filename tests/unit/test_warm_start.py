"""Warm start (option warm_start; Note [Warm start] in mybackend/warm_start.py).

The cross-process tests run each step in a fresh interpreter
(tests.testing.run_in_fresh_python) sharing one TORCHINDUCTOR_CACHE_DIR,
and assert what a process did by its compile counters (Note [Compile
counters]), never by time. A child imports the same mybackend as this
process does; to run them against another checkout than the installed
one, put a folder with a sitecustomize.py that puts that checkout first
on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.fx
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._functorch.aot_autograd import aot_function

from mybackend import _C, compile_times, warm_start
from mybackend.compile_times import (
    AOT_COMPILES,
    CORE_PLAN_LOADS,
    CORE_PLANS,
    JOINT_PARTITIONS,
    LOWERINGS,
    WARM_LOADS,
    WARM_REJECTS,
    WARM_SAVES,
    WARM_STAGE,
    breakdown,
)
from mybackend.lowering import lower
from mybackend.options import Options
from mybackend.source_keys import TORCH_KEY_LOADED, TORCH_KEY_STORED
from tests.testing import run_in_fresh_python

# One child process: compiles a small MLP with warm start on, once per
# variant in VARIANTS (each after a dynamo reset), and prints what each
# compile did, the outputs' and gradients' largest error against eager, and
# whether torch traced, as one JSON line.
CHILD = r"""
import json
import torch
import torch._dynamo
import mybackend
from mybackend import compile_times, warm_start
from torch._dynamo.utils import compilation_time_metrics, counters
from mybackend.ops import cross_entropy
from mybackend.passes import pipeline

CONFIG = json.loads({config!r})
REWRITES = [0]  # cross-entropy calls rewritten to mybackend's fused loss
_rewrite = pipeline.rewrite_cross_entropy

def counted_rewrite(*args, **kwargs):
    done = _rewrite(*args, **kwargs)
    REWRITES[0] += done
    return done

pipeline.rewrite_cross_entropy = counted_rewrite

def run(variant):
    width = variant.get("width", 16)
    activation = torch.nn.GELU() if variant.get("gelu") else torch.nn.ReLU()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, width), activation, torch.nn.Linear(width, 4))
    dtype = getattr(torch, variant.get("dtype", "float32"))
    model = model.to(dtype)
    x = torch.randn(*variant.get("shape", [3, 8]), dtype=dtype)
    if variant.get("transposed"):
        x = x.t().contiguous().t()
    options = {{"warm_start": True, **variant.get("options", {{}})}}
    step = model
    if variant.get("loss") == "cross_entropy":  # rewritten to mybackend's fused loss
        cross_entropy.REWRITTEN_DEVICES = ("cpu",)
        target = torch.arange(x.shape[0]) % 4
        step = lambda inp: torch.nn.functional.cross_entropy(model(inp), target)
    compiled = torch.compile(step, backend="mybackend", options=options)
    train = variant.get("train", True)
    before = compile_times.counts()
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    traced = sum(len(compilation_time_metrics.get(k, ())) for k in
                 ("aot_collect_metadata", "aot_trace_joint_graph"))
    rewrites_before = REWRITES[0]
    with torch.set_grad_enabled(train):
        out = compiled(x)
        ref = step(x)
    error = (out - ref).abs().max().item()
    if train:
        out.sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        ref.sum().backward()
        error = max([error] + [(g - p.grad).abs().max().item()
                               for g, p in zip(got, model.parameters())])
    after = compile_times.counts()
    traced_after = sum(len(compilation_time_metrics.get(k, ())) for k in
                       ("aot_collect_metadata", "aot_trace_joint_graph"))
    return {{
        "counts": {{k: after.get(k, 0) - before.get(k, 0) for k in after}},
        "hits": counters["aot_autograd"]["autograd_cache_hit"] - hits,
        "aot_traces": traced_after - traced,
        "error": error,
        "rewrites": REWRITES[0] - rewrites_before,
    }}

results = []
for variant in CONFIG["variants"]:
    patch = variant.get("patch")
    if patch == "torch_version":  # what torch hashes as its own version
        import torch._inductor.codecache as codecache
        codecache.torch_key = lambda: b"another torch"
    elif patch == "mybackend_version":
        mybackend.__version__ = "99.0"
    elif patch == "device":  # another GPU: mybackend's device part of the key
        warm_start.device_fingerprint = lambda: "cuda_build=True,cudnn=90000,cc=9.0"
    torch._dynamo.reset()
    results.append(run(variant))
print("RESULT " + json.dumps(results))
"""


def run_child(
    cache: Path, variants: list[dict[str, Any]], extra_env: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Runs CHILD in a fresh interpreter; returns its results and stderr."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), **(extra_env or {})}
    env.pop("MYBACKEND_DUMP_DIR", None)  # dumps turn warm start off
    code = CHILD.format(config=json.dumps({"variants": variants}))
    done = run_in_fresh_python(code, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), done.stderr


def recompiled(result: dict[str, Any]) -> bool:
    counts = result["counts"]
    return result["hits"] == 0 and counts.get(AOT_COMPILES, 0) > 0 and counts.get(LOWERINGS, 0) > 0


def test_second_process_does_no_aot_trace_and_no_lowering(tmp_path: Path) -> None:
    variants = [{"train": True}, {"train": False}]
    graphs = [2, 1]  # forward and backward; the inference graph
    cold, _ = run_child(tmp_path, variants)
    assert [r["counts"][AOT_COMPILES] for r in cold] == graphs
    assert [r["counts"][WARM_SAVES] for r in cold] == graphs
    warm, _ = run_child(tmp_path, variants)
    # torch's source key: computed and stored by the first process, read by
    # the second (Note [Source keys kept]).
    assert cold[0]["counts"][TORCH_KEY_STORED] == 1
    assert warm[0]["counts"][TORCH_KEY_LOADED] == 1
    assert TORCH_KEY_STORED not in warm[0]["counts"]
    for result, count in zip(warm, graphs, strict=True):
        assert result["hits"] == 1 and result["aot_traces"] == 0
        counts = result["counts"]
        assert counts.get(AOT_COMPILES, 0) == 0  # aot_autograd called no compiler: no trace
        assert counts.get(JOINT_PARTITIONS, 0) == 0
        assert counts.get(LOWERINGS, 0) == 0
        assert counts[WARM_LOADS] == count
        assert result["error"] <= 1e-5  # outputs and gradients as eager's


def test_a_step_with_a_fused_loss_is_kept_and_loaded(tmp_path: Path) -> None:
    # The rewrite puts mybackend's fused cross-entropy into the dynamo graph,
    # which torch's cache keeps only if it can name the call.
    variants = [{"loss": "cross_entropy"}]
    (cold,), _ = run_child(tmp_path, variants)
    assert cold["rewrites"] == 1
    assert cold["counts"][WARM_SAVES] == 2
    (warm,), _ = run_child(tmp_path, variants)
    assert warm["hits"] == 1 and warm["aot_traces"] == 0
    assert warm["counts"].get(LOWERINGS, 0) == 0 and warm["counts"][WARM_LOADS] == 2
    assert warm["error"] <= 1e-5


def test_second_process_does_not_plan(tmp_path: Path) -> None:
    run_child(tmp_path, [{"train": True}])
    (warm,), _ = run_child(tmp_path, [{"train": True}])
    assert warm["counts"].get(CORE_PLANS, 0) == 0
    assert warm["counts"][CORE_PLAN_LOADS] == 2


# Each differs from the base (training, float32 [3, 8] inputs, ReLU, default
# options, this torch, mybackend and device) in one thing the key must see.
INVALIDATIONS: dict[str, dict[str, Any]] = {
    "graph": {"gelu": True},
    "parameter shapes": {"width": 32},
    "input shape": {"shape": [5, 8]},
    "input dtype": {"dtype": "float64"},
    "input strides": {"transposed": True},
    "grad mode": {"train": False},
    "codegen option": {"options": {"min_partition_size": 2}},
    "other option": {"options": {"strict": True}},
    "torch version": {"patch": "torch_version"},
    "mybackend version": {"patch": "mybackend_version"},
    "device": {"patch": "device"},
}


def test_every_invalidation_recompiles(tmp_path: Path) -> None:
    run_child(tmp_path, [{}])
    # The version and device patches stay for the rest of a child: they go last.
    names = list(INVALIDATIONS)
    results, _ = run_child(tmp_path, [INVALIDATIONS[name] for name in names])
    missed = [name for name, result in zip(names, results, strict=True) if not recompiled(result)]
    assert not missed, f"loaded from the cache although changed: {missed}"
    assert all(r["error"] <= 1e-5 for r in results)
    # The unchanged model still loads: the misses were the changes'.
    (base,), _ = run_child(tmp_path, [{}])
    assert base["hits"] == 1 and base["counts"].get(LOWERINGS, 0) == 0


def test_a_corrupted_entry_is_ignored_with_one_warning(tmp_path: Path) -> None:
    run_child(tmp_path, [{}])
    entries = [p for p in (tmp_path / "aotautograd").rglob("*") if p.is_file()]
    assert entries
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[: len(entry.read_bytes()) // 2])
    (result,), stderr = run_child(tmp_path, [{}])
    assert recompiled(result) and result["error"] <= 1e-5
    assert result["counts"][WARM_REJECTS] == 1
    # One warning (warn_once: a UserWarning, and the same line logged).
    assert stderr.count("UserWarning: mybackend: a warm-start cache entry") == 1, stderr
    assert "unable to load compiled graph" not in stderr  # torch's own log, replaced
    # The entry saved beside it loads; the corrupted one still warns, once.
    (again,), stderr = run_child(tmp_path, [{}])
    assert again["hits"] == 1 and again["counts"].get(LOWERINGS, 0) == 0
    assert stderr.count("UserWarning: mybackend: a warm-start cache entry") <= 1


# --- in-process -------------------------------------------------------------------


def _lowered(
    fn: Callable[..., Any], inputs: list[torch.Tensor]
) -> tuple[Any, list[torch.Tensor], torch.fx.GraphModule]:
    graphs: list[Any] = []

    def keep(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append((gm, list(inputs)))
        return gm

    aot_function(fn, fw_compiler=keep)(*inputs)
    gm, example_inputs = graphs[0]
    return lower(gm, example_inputs), inputs, gm


def _lowered_mlp() -> tuple[Any, list[torch.Tensor], torch.fx.GraphModule]:
    inputs = [torch.randn(3, 8), torch.randn(16, 8)]
    return _lowered(lambda x, w: torch.relu(x @ w.t()).sum(1), inputs)


def test_a_replayed_tape_builds_the_same_graph() -> None:
    lowered, _, _ = _lowered_mlp()
    assert lowered.tape is not None
    again = lowered.tape.replay()
    assert again.structural_hash() == lowered.graph.structural_hash()
    assert again.to_text(True) == lowered.graph.to_text(True)
    replayed = pickle.loads(pickle.dumps(lowered.tape)).replay()
    assert replayed.to_text(True) == lowered.graph.to_text(True)


def test_a_saved_plan_is_compiled_without_planning_and_a_wrong_one_plans_again() -> None:
    lowered, inputs, _ = _lowered_mlp()
    core_options = Options().core_options()
    core = _C.compile(lowered.graph, core_options)
    plan = core.plan_bytes()
    loaded = _C.compile_planned(lowered.graph, plan, core_options)
    assert [s for s, _ in loaded.stage_times()] == ["verify", "load_plan", "codegen", "runtime"]
    assert loaded.plan_bytes() == plan
    for key in ("nodes", "kernels", "partitions", "schedule"):
        assert loaded.report()[key] == core.report()[key]
    torch.testing.assert_close(loaded.run(list(inputs)), core.run(list(inputs)))
    # Bytes that are not this graph's plan under these options raise _C.Error...
    wrong = {
        "truncated": (lowered.graph, plan[:-1], core_options),
        "magic number": (lowered.graph, b"not a plan", core_options),
        "other partitioner options": (
            lowered.graph,
            plan,
            {**core_options, "min_partition_size": 7},
        ),
    }
    for message, (graph, data, options) in wrong.items():
        with pytest.raises(_C.Error, match=message):
            _C.compile_planned(graph, data, options)
    # ...on which compile_core plans again, as for a plan of another graph.
    other, _, _ = _lowered(lambda x: x.sin() + 1, [torch.randn(3)])
    before = compile_times.counts()
    warm_start.compile_core(lowered.graph, core_options, plan[: len(plan) // 2])
    warm_start.compile_core(other.graph, core_options, plan)
    after = compile_times.counts()
    assert after[CORE_PLANS] - before.get(CORE_PLANS, 0) == 2
    assert after.get(CORE_PLAN_LOADS, 0) == before.get(CORE_PLAN_LOADS, 0)


def _recipe(options: Options) -> tuple[warm_start.GraphRecipe, list[torch.Tensor]]:
    """The recipe of the MLP's forward graph."""
    lowered, inputs, planned = _lowered_mlp()
    core_options = options.core_options()
    core = _C.compile(lowered.graph, core_options)
    parts = warm_start.CompiledParts("forward", lowered, core, core_options, planned, None)
    recipe = warm_start.recipe_for(parts, options)
    assert isinstance(recipe, warm_start.GraphRecipe), recipe
    return recipe, inputs


def _output_code() -> tuple[warm_start.WarmStartOutputCode, list[torch.Tensor]]:
    recipe, inputs = _recipe(Options(warm_start=True))
    fn = recipe.build("graph0.forward")
    return warm_start.WarmStartOutputCode(fn, recipe, "forward"), inputs


def test_an_output_code_loads_from_its_pickle_and_runs_the_same() -> None:
    code, inputs = _output_code()
    expected = code([t.clone() for t in inputs])
    loaded = pickle.loads(pickle.dumps(code))
    loaded.post_compile([], None, {})
    torch.testing.assert_close(loaded([t.clone() for t in inputs]), expected)
    # The live object is untouched by torch's copy-and-prepare before a save.
    prepared = code.__copy__()
    prepared.prepare_for_serialization()
    torch.testing.assert_close(code([t.clone() for t in inputs]), expected)
    # The eager fallback (the planned ATen graph) comes back from its bytes too.
    recipe = pickle.loads(prepared.__getstate__()["payload"])
    eager = warm_start.DeferredGraphModule(recipe.eager)
    torch.testing.assert_close(list(eager(*inputs)), expected)


def test_a_tampered_or_foreign_payload_is_rejected() -> None:
    code, _ = _output_code()
    state = code.__getstate__()
    payload = bytearray(state["payload"])
    payload[len(payload) // 2] ^= 0xFF
    loaded = object.__new__(warm_start.WarmStartOutputCode)
    with pytest.raises(warm_start.RejectedEntry, match="digest"):
        loaded.__setstate__({**state, "payload": bytes(payload)})
    with pytest.raises(warm_start.RejectedEntry, match="format"):
        loaded.__setstate__({**state, "format": warm_start.FORMAT + 1})


def test_graphs_that_cannot_be_kept_say_why() -> None:
    code = warm_start.WarmStartOutputCode(lambda args: args, "it fell back to eager", "forward")
    with pytest.raises(BypassAOTAutogradCache, match="fell back to eager"):
        code.__copy__().prepare_for_serialization()


def test_the_key_tag_changes_with_options_and_keeps_the_users() -> None:
    base = warm_start.cache_key_tag(Options(warm_start=True))
    assert base != warm_start.cache_key_tag(Options(warm_start=True, min_partition_size=3))
    assert warm_start.cache_key_tag(Options(), "users-tag").startswith("users-tag|mybackend=")


def test_debugging_options_turn_warm_start_off() -> None:
    assert warm_start.enabled(Options(warm_start=True))
    assert not warm_start.enabled(Options())
    assert not warm_start.enabled(Options(warm_start=True, accuracy_check=True))
    assert not warm_start.enabled(Options(warm_start=True, background_compile=True))
    assert not warm_start.enabled(Options(warm_start=True, dump_dir="/tmp/x"))


def test_the_breakdown_shows_the_rebuild_apart_from_planning() -> None:
    record = SimpleNamespace(stage_times=[(WARM_STAGE, 0.25), ("fusion", 0.5), ("runtime", 1.0)])
    stages = breakdown({}, {}, 2.0, [record])
    assert stages["mybackend warm start (IR rebuilt from the cache)"] == 0.25
    assert stages["mybackend core: planning (capability, partition, fusion)"] == 0.5
