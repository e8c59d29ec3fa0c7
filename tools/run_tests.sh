#!/usr/bin/env bash
# The whole test suite: set-up and build, C++ unit tests (CTest), Python
# tests (GPU tests skip cleanly without a GPU), generated-docs freshness, and
# the quick benchmark on tiny models.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# GoogleTest for the C++ unit tests (Debian's package; present on our image),
# before the set-up configures the build.
if command -v apt-get >/dev/null && ! dpkg -s libgtest-dev >/dev/null 2>&1; then
  (apt-get install -y -q libgtest-dev >/dev/null 2>&1 ||
   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libgtest-dev >/dev/null 2>&1)) ||
    echo "run_tests: libgtest-dev could not be installed; C++ unit tests will not build"
fi

bash tools/setup.sh

# The C++ unit tests build in the extension's own build tree (the newest
# build/<wheel tag>/), linking the libraries the set-up just built: only the
# tests' own units compile here (Note in tests/cpp/CMakeLists.txt).
build_dir=$(dirname "$(ls -td build/*/CMakeCache.txt | head -n 1)")
echo "run_tests: building the C++ unit tests in $build_dir"
cmake --build "$build_dir" --target mybackend_cpp_tests -j "$(nproc)"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"

"$PY" tools/gen_docs.py --check
"$PY" -m benchmarks --quick --isolate --strict --no-progress --out bench_out
# Last, so the test runner's summary closes the output.
"$PY" -m pytest tests -q -p no:cacheprovider "$@"
