#!/usr/bin/env bash
# Installs what mybackend needs and builds it in place (editable), on a fresh
# machine or an existing one. Idempotent: a second run rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# torch first, on its own: the extension builds against the torch that is
# installed (no build isolation, so pip never brings a second torch).
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.11.*"
fi
"$PY" -m pip install -q scikit-build-core "pybind11>=2.12" ninja cmake numpy networkx sympy \
  pytest pytest-benchmark expecttest hypothesis nbclient nbformat ipykernel matplotlib tqdm
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$PY" -m pip install -q --no-build-isolation --no-deps -e .
"$PY" -c "import mybackend; print('mybackend', mybackend.__version__, 'built with CUDA:', mybackend.cuda_enabled())"
