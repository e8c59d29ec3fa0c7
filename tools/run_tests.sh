#!/usr/bin/env bash
# The whole test suite: set-up and build, C++ unit tests (CTest), Python
# tests (GPU tests skip cleanly without a GPU), generated-docs freshness, and
# the quick benchmark on tiny models.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash tools/setup.sh

build_dir=$(dirname "$(ls -d build/*/CTestTestfile.cmake | head -n 1)")
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"

"$PY" tools/gen_docs.py --check
"$PY" -m benchmarks --quick --isolate --strict --no-progress --out bench_out
# Last, so the test runner's summary closes the output.
"$PY" -m pytest tests -q -p no:cacheprovider "$@"
