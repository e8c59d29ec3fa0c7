#!/usr/bin/env bash
# Builds mybackend in place on a device machine, or restores the build of an
# earlier call when the C++ sources have not changed since.
#
#   bash tools/device_build.sh [LOG]      # LOG: the pip log (default $OUT/build.log)
#   bash tools/device_build.sh --hash     # only print the hash of the build's inputs
#
# Note [Builds carried between device calls]
# Each device call starts on a fresh machine, and the editable build of the
# extension takes 100-120 s of it on 16 cores: a quarter of a session's
# device time went to rebuilding sources that had not changed. So after a
# build this script saves what `pip install -e .` put into site-packages
# (the compiled _C, the editable hook that points at this checkout, the
# package metadata that registers the backend) as $OUT/prebuilt/site.tgz,
# with the hash of every input of the C++ build (src_cpp/, cmake/, the CMake
# and pyproject files, tools/build_meta/), the names of the package's Python
# modules (the hook lists them) and the Python and torch it was built for. Copied back into ./.prebuilt/ (git ignores it) and carried into
# the next call (carry [".prebuilt"]), the same hash restores it in seconds;
# any other hash, or a restored extension that does not import, builds again.
# The two files count against the eight a call brings back from $OUT.
# The checkout sits at the same path on every device machine, which the
# editable hook names.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench_out}

build_hash() {
  {
    find src_cpp cmake tools/build_meta -type f -print0 | sort -z | xargs -0 sha256sum
    sha256sum CMakeLists.txt pyproject.toml
    find mybackend -name '*.py' | sort  # the editable hook lists the modules by name
    python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)'
  } | sha256sum | cut -d' ' -f1
}

imports() {
  python3 -c 'import mybackend._C' >/dev/null 2>&1
}

hash=$(build_hash)
if [ "${1:-}" = --hash ]; then
  echo "$hash"
  exit 0
fi
log=${1:-$out/build.log}
mkdir -p "$out" "$(dirname "$log")"
start=$SECONDS
if [ -f .prebuilt/site.tgz ] && [ "$(cat .prebuilt/hash 2>/dev/null)" = "$hash" ]; then
  if tar -xzf .prebuilt/site.tgz -C / 2>>"$log" && imports; then
    echo "restored the build of an earlier call ($((SECONDS - start)) s; sources unchanged)"
    exit 0
  fi
  echo "the carried build did not restore; building"
fi
python3 -m pip install --no-build-isolation --no-deps -e . >"$log" 2>&1 || {
  echo "build failed (see $log)"
  tail -20 "$log"
  exit 1
}
echo "built in $((SECONDS - start)) s"
# What pip installed, as absolute paths, for the next call.
files=$(python3 - <<'EOF'
import importlib.metadata as md
import pathlib

dist = md.distribution("mybackend")
for f in dist.files or []:
    path = pathlib.Path(dist.locate_file(f)).resolve()
    if path.is_file():
        print(path)
EOF
)
if [ -n "$files" ]; then
  mkdir -p "$out/prebuilt"
  # shellcheck disable=SC2086
  if tar -czf "$out/prebuilt/site.tgz" -P $files 2>>"$log"; then
    echo "$hash" >"$out/prebuilt/hash"
    echo "saved the build as $out/prebuilt/site.tgz (carry it as .prebuilt next time)"
  fi
fi
