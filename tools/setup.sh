#!/usr/bin/env bash
# Installs what mybackend needs and builds it in place (editable), on a fresh
# machine or an existing one. Idempotent: a second run rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# GoogleTest for the C++ unit tests (Debian's package; present on our image).
if command -v apt-get >/dev/null && ! dpkg -s libgtest-dev >/dev/null 2>&1; then
  (apt-get install -y -q libgtest-dev >/dev/null 2>&1 ||
   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libgtest-dev >/dev/null 2>&1)) ||
    echo "setup: libgtest-dev could not be installed; C++ unit tests will not build"
fi

# torch first, on its own: the extension builds against the torch that is
# installed (no build isolation, so pip never brings a second torch).
# numpy with it: torch imported without numpy warns "Failed to initialize NumPy".
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: installing torch 2.11 (a large download)"
  "$PY" -m pip install -q "torch==2.11.*" numpy
fi
# torchvision releases pair with one torch minor version (2.11 -> 0.26).
torchvision_pin=$("$PY" -c "import torch; m = int(torch.__version__.split('.')[1]); print(f'0.{m + 15}.*')")
"$PY" -m pip install -q scikit-build-core "pybind11>=2.12" "nvidia-cudnn-frontend>=1.12" ninja cmake numpy networkx sympy \
  pytest pytest-benchmark expecttest hypothesis nbclient nbformat ipykernel matplotlib tqdm \
  timm transformers "torchvision==$torchvision_pin"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$PY" -m pip install -q --no-build-isolation --no-deps -e .
"$PY" -c "import mybackend, torch; print('mybackend', mybackend.__version__, '| CUDA kernels built:', mybackend.cuda_enabled(), '| GPU present:', torch.cuda.is_available())"
