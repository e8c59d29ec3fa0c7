#!/usr/bin/env bash
# Installs what mybackend needs and builds it in place (editable), on a fresh
# machine or an existing one. Idempotent: a second run rebuilds incrementally.
# It builds the extension only: the C++ unit tests are built by
# tools/run_tests.sh, in the same build tree (build/<wheel tag>/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# pip's warning about running as root (containers, CI) says nothing about this set-up.
export PIP_ROOT_USER_ACTION=ignore
# Each step's seconds, so that a slow set-up says where its time went.
step_start=$SECONDS
step_done() { echo "setup:   done in $((SECONDS - step_start)) s"; step_start=$SECONDS; }

# torch first, on its own: the extension builds against the torch that is
# installed (no build isolation, so pip never brings a second torch).
# numpy with it: torch imported without numpy warns "Failed to initialize NumPy".
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: installing torch 2.11 (a large download)"
  "$PY" -m pip install -q "torch==2.11.*" numpy
  step_done
fi
# torchvision releases pair with one torch minor version (2.11 -> 0.26).
torchvision_pin=$("$PY" -c "import torch; m = int(torch.__version__.split('.')[1]); print(f'0.{m + 15}.*')")
echo "setup: installing the build tools and the test and benchmark packages"
"$PY" -m pip install -q "scikit-build-core>=1.0" "pybind11>=2.12" "nvidia-cudnn-frontend>=1.12" ninja cmake numpy networkx sympy \
  pytest pytest-benchmark expecttest hypothesis nbclient nbformat ipykernel matplotlib tqdm \
  timm transformers "torchvision==$torchvision_pin"
step_done
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# pip -v streams CMake's and ninja's output: the whole of it goes to the log,
# and every tenth of ninja's [n/N] steps is shown.
log=build/setup-build.log
mkdir -p build
echo "setup: building mybackend (C++/CUDA, $CMAKE_BUILD_PARALLEL_LEVEL jobs; log: $log)"
if ! "$PY" -m pip install -v --no-build-isolation --no-deps -e . 2>&1 | tee "$log" |
    awk -F'[][/]' '/^ *\[[0-9]+\/[0-9]+\] / { n = $2; t = $3; p = int(10 * n / t)
      if (p > last) { last = p; printf "setup:   %d/%d build steps\n", n, t; fflush() } }'; then
  tail -n 40 "$log"
  echo "setup: the build failed; the whole log is $log"
  exit 1
fi
step_done
echo "setup: finished in $SECONDS s"
"$PY" -c "import mybackend, torch; print('mybackend', mybackend.__version__, '| CUDA kernels built:', mybackend.cuda_enabled(), '| GPU present:', torch.cuda.is_available())"
