#!/usr/bin/env bash
# Sweep of the batch-norm reductions' launch knobs (docs/performance.md,
# "Tuning knobs of generated kernels") over ResNet-50's layer shapes.
#
#   bash benchmarks/micro/tune_batch_norm.sh                 # about 4 minutes on an H200
#   bash benchmarks/micro/tune_batch_norm.sh "MYBACKEND_BN_ROW_UNROLL=2" ...   # your own settings
#
# Each setting is one process (the knobs are read once per process) running
# `python -m benchmarks.micro.batch_norm`; the first setting is the defaults.
# The kernels compile into a private cache folder, so each setting's
# source is compiled once and the sweep leaves the user's cache alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT

if [ "$#" -gt 0 ]; then
  settings=("" "$@")
else
  settings=(
    ""
    "MYBACKEND_BN_ROW_UNROLL=2"
    "MYBACKEND_BN_ROW_UNROLL=8"
    "MYBACKEND_BN_CHUNK_PASSES=4"
    "MYBACKEND_BN_CHUNK_PASSES=16"
    "MYBACKEND_BN_MAX_LANES=64"
    "MYBACKEND_BN_MAX_LANES=256 MYBACKEND_BN_CHUNK_PASSES=8"
    "MYBACKEND_BN_MIN_BLOCKS=4"
  )
fi

for setting in "${settings[@]}"; do
  echo "== ${setting:-defaults}"
  # shellcheck disable=SC2086  # a setting is several VAR=value words
  env $setting MYBACKEND_CACHE_DIR="$cache" python3 -m benchmarks.micro.batch_norm
done
