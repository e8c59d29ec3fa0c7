#!/usr/bin/env bash
# The device script: the figures of docs/performance.md come from here.
#
#   bash benchmarks/gpu_run.sh STEP [MODEL] [extra python -m benchmarks options]
#
# One device command may run 10 minutes, so the full suite is split into steps
# that each fit (one or more per call, in any order; 13 in all):
#
#   tests          the whole test suite on the GPU (GPU-marked tests run here), C++ tests too
#   micro          device ceilings + kernel micro-benchmarks (benchmarks/micro)
#   infer MODEL    inference at batch 1 and 32 (MODEL: resnet50 vit_b16 bert_base gpt2 mlp)
#   train MODEL    the training step at the model's own batch
#   smoke          mlp inference batch 1, every backend, no warm-cache subprocess
#   profile MODEL  GPU time per kernel of one step, per backend (benchmarks/profile.py)
#   queue STEP...  several steps at once, one per GPU of the machine, e.g.
#                  queue "infer resnet50" "train gpt2" tests micro
#                  (benchmarks/gpu_queue.py; one merged table, everything in
#                  $OUT/queue/queue.tgz)
#   model MODEL    any model of the registry (the zoo's included): inference at
#                  batch 1 and its throughput batch, then its training step,
#                  against $ZOO_BACKENDS, no fresh-process compile subprocess
#   zoo [SELECTION [options]]  one 'model' step per zoo model, one model per
#                  GPU, inside one deadline; SELECTION is a comma list of models
#                  and zoo families (default: the whole zoo), options go to each
#                  model's python -m benchmarks. One merged table in
#                  $OUT/zoo/results.md, everything in $OUT/zoo/queue.tgz. The
#                  whole zoo needs several calls even on 8 GPUs: run it a
#                  family at a time (zoo cnn, zoo decoder...); models the
#                  deadline left unstarted are printed as the next command.
#   sweep [options] the op sweep of every engine (tests/gpu/test_engine_sweep.py) with
#                  the OpInfo and layout sweeps; the per-engine table of docs/op-sweep.md
#                  in $OUT/sweep/op-sweep.md (python -m benchmarks.engine_sweep; options
#                  such as --files FILE... or -k EXPR go to it)
#   startup [MODELS [options]]  first training calls in fresh processes, cold
#                  and then warm on the caches the cold one left, for mybackend
#                  with option warm_start and for Inductor, split by stage
#                  (python -m benchmarks.compile_breakdown --warm; MODELS: a comma
#                  list, default resnet50,bert_base,gpt2); $OUT/startup/startup.md
#   dist [options] DDP and FSDP2 training of GPT-2 small under torchrun, one
#                  process per GPU of the machine (NCCL, NVLink multicast off):
#                  eager, Inductor and mybackend ms per step and a loss check
#                  (benchmarks/distributed.py; its options, e.g. --setups ddp)
#
# Seen on one H100 (2026-11-22, mybackend absent): gpt2 inference batch 1 with
# four backends took 140 s, most of it compiling (in process and in the
# warm-cache subprocesses); resnet50 training with three, 70 s without them.
#
# Each step writes results.json, results.md and charts to $OUT/STEP[-MODEL]
# (the device tool's output folder; ./bench_out elsewhere, which git ignores). Merge the
# fetched folders on any machine with:
#
#   python -m benchmarks.report FOLDER1 FOLDER2 ... --out merged
#
# BUILD=1 first builds mybackend in place (tools/device_build.sh: pip install -e .
# --no-build-isolation, or the carried build of an earlier call when the C++
# sources have not changed, Note [Builds carried between device calls]);
# otherwise mybackend is used if importable, and reads 'unavailable' if not.
# Rows run with --isolate: a backend that crashes the process is marked
# 'crashed' and the rest of its row is measured again without it. A step is
# stopped after STEP_SECONDS (default 540, the build included) and its partial
# results reported.
set -uo pipefail
cd "$(dirname "$0")/.."

step=${1:-smoke}
shift || true
case "$step" in
  tests|micro|infer|train|smoke|queue|profile|model|zoo|sweep|dist|startup) ;;
  *) echo "unknown step '$step' (see the head of $0)"; exit 2 ;;
esac
model=""
if [ "$step" = infer ] || [ "$step" = train ] || [ "$step" = profile ] || [ "$step" = model ]; then
  model=${1:?"usage: $0 $step MODEL [options]"}
  shift
fi
out_root=${OUT:-bench_out}
out="$out_root/$step${model:+-$model}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
limit=${STEP_SECONDS:-540}
# The backends of the zoo's table ('model' and 'zoo' steps).
zoo_backends=${ZOO_BACKENDS:-eager,inductor,inductor-reduce-overhead,mybackend,mybackend-reduce-overhead}

if [ "${BUILD:-0}" = 1 ]; then
  build_start=$SECONDS
  bash tools/device_build.sh "$out/build.log" \
    || echo "mybackend rows will read 'unavailable'"
  # The step limit counts from the call's start: the build spends part of it.
  limit=$(( limit - (SECONDS - build_start) ))
  echo "built in $((SECONDS - build_start)) s; $limit s left for the step"
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv 2>/dev/null || echo "nvidia-smi unavailable"
python3 - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
      torch.cuda.get_device_name() if torch.cuda.is_available() else None)
try:
    import mybackend
    print("mybackend", mybackend.__version__, "cuda_enabled", mybackend.cuda_enabled())
except Exception as exc:
    print("mybackend not importable:", exc)
EOF

bench() {
  timeout --signal=INT --kill-after=20 "$limit" \
    python3 -m benchmarks --isolate --device-ceilings --no-progress --out "$out" "$@"
  local rc=$?
  if [ ! -f "$out/results.md" ] && [ -f "$out/results.json" ]; then
    echo "step stopped early (exit $rc): reporting the rows it finished"
    python3 -m benchmarks.report "$out" --out "$out"
  fi
  return $rc
}

case "$step" in
  tests)
    timeout --signal=INT "$limit" python3 -m pytest tests -q -p no:cacheprovider \
      --ignore=tests/benchmarks "$@" >"$out/pytest.log" 2>&1
    grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -30
    echo "pytest on $(python3 -c 'import torch; print(torch.cuda.get_device_name())'):" \
      "$(tail -n 1 "$out/pytest.log")" ;;
  micro)
    timeout --signal=INT "$limit" python3 -m benchmarks.micro --out "$out" "$@" ;;
  infer) bench --scenarios inference --models "$model" "$@" ;;
  train) bench --scenarios training --models "$model" "$@" ;;
  smoke) bench --scenarios inference --models mlp --batch 1 --no-warm-compile "$@" ;;
  profile)
    timeout --signal=INT "$limit" python3 -m benchmarks.profile --models "$model" --out "$out" "$@" ;;
  queue) python3 -m benchmarks.gpu_queue --out "$out" --deadline "$limit" "$@" ;;
  model)
    bench --scenarios inference,training --models "$model" --backends "$zoo_backends" \
      --no-warm-compile "$@" ;;
  sweep)
    timeout --signal=INT --kill-after=30 "$limit" \
      python3 -m benchmarks.engine_sweep --out "$out" "$@" >"$out/pytest.log" 2>&1
    rc=$?
    grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -30
    tail -n 3 "$out/pytest.log"
    [ -f "$out/op-sweep.md" ] && cat "$out/op-sweep.md"
    exit $rc ;;
  zoo)
    selection=${1:-zoo}
    shift || true
    python3 -m benchmarks.gpu_queue --out "$out" --deadline "$limit" \
      --work /tmp/mybackend-zoo --models "$selection" --model-options="$*" ;;
  startup)
    models=${1:-resnet50,bert_base,gpt2}
    shift || true
    timeout --signal=INT --kill-after=20 "$limit" \
      python3 -m benchmarks.compile_breakdown --models "$models" \
      --backends mybackend-warm-start,inductor --processes 1 --warm "$@" | tee "$out/startup.md" ;;
  dist)
    # NVLink multicast (NVLS) stays off on these machines.
    export NCCL_NVLS_ENABLE=0
    gpus=$(python3 -c 'import torch; print(max(torch.cuda.device_count(), 1))')
    timeout --signal=INT --kill-after=20 "$limit" \
      python3 -m torch.distributed.run --standalone --nproc-per-node "$gpus" \
      benchmarks/distributed.py --out "$out" "$@" ;;
esac
