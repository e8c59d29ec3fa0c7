#!/usr/bin/env bash
# Sweep of the generated kernels' launch knobs (docs/performance.md, "Tuning
# knobs of generated kernels") on the four memory-bound micro cases.
#
#   bash benchmarks/micro/tune_generated.sh            # about 3 minutes on an H100
#   BUILD=1 bash benchmarks/micro/tune_generated.sh    # build mybackend in place first (extra time)
#
# Each setting is one process (the knobs are read once per process) running
#   python -m benchmarks.micro --backends mybackend --cases ...
# Pointwise knobs only change the pointwise case and norm knobs only the
# three row-wise ones (softmax knobs the softmax case only), so every
# setting moves several at once. The table gives
# the percentage of the roofline (and ms) per case; results go to
# $OUT/tune (./bench_out/tune elsewhere).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench_out}/tune
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cases=pointwise_chain,layer_norm,rms_norm,softmax

if [ "${BUILD:-0}" = 1 ]; then
  python3 -m pip install --no-build-isolation --no-deps -e . >"$out/build.log" 2>&1 \
    || { echo "build failed (see $out/build.log)"; tail -20 "$out/build.log"; exit 1; }
fi

# name | PW_BLOCK PW_VEC_PER_THREAD PW_BLOCKS_PER_SM | NORM_BLOCK NORM_VEC_PER_THREAD
#        NORM_BLOCKS_PER_SM | SOFTMAX_BLOCK SOFTMAX_BLOCKS_PER_SM
settings=(
  "default   256 2 0  256 4 8  128 0"
  "s1        128 1 0  256 2 8  256 0"
  "s2        256 4 0  256 16 8 128 8"
  "s3        512 2 0  256 8 8  64 0"
  "s4        256 2 8  128 4 0  256 8"
  "s5        256 1 0  256 4 0  512 0"
)

for s in "${settings[@]}"; do
  read -r name pb pv pg nb nv ng sb sg <<<"$s"
  MYBACKEND_PW_BLOCK=$pb MYBACKEND_PW_VEC_PER_THREAD=$pv MYBACKEND_PW_BLOCKS_PER_SM=$pg \
  MYBACKEND_NORM_BLOCK=$nb MYBACKEND_NORM_VEC_PER_THREAD=$nv MYBACKEND_NORM_BLOCKS_PER_SM=$ng \
  MYBACKEND_SOFTMAX_BLOCK=$sb MYBACKEND_SOFTMAX_BLOCKS_PER_SM=$sg \
    timeout 60 python3 -m benchmarks.micro --backends mybackend --cases "$cases" \
    --repeats 10 --out "$out/$name" >"$out/$name.log" 2>&1 \
    || echo "setting $name failed or timed out (see $out/$name.log)"
done

python3 - "$out" "${settings[@]}" <<'PY'
import json
import sys
from pathlib import Path

out, settings = Path(sys.argv[1]), sys.argv[2:]
cases = ["pointwise_chain", "layer_norm", "rms_norm", "softmax"]
print("setting  | pw blk/vec/bpsm | norm blk/vec/bpsm | softmax blk/bpsm | " + " | ".join(cases))
for s in settings:
    name, pb, pv, pg, nb, nv, ng, sb, sg = s.split()
    cells = {}
    path = out / name / "micro.json"
    if path.exists():
        for r in json.loads(path.read_text())["results"]:
            if r["status"] == "ok":
                cells[r["case"]] = f"{100 * r['fraction']:.0f}% {r['median_ms']:.3f}ms"
                if r["rel_error"] is not None and r["rel_error"] > 2e-2:
                    cells[r["case"]] += f" ERR {r['rel_error']:.1e}"
            else:
                cells[r["case"]] = r["status"]
    row = [cells.get(c, "-") for c in cases]
    print(f"{name:8} | {pb:>4}/{pv}/{pg:<8} | {nb:>4}/{nv:>2}/{ng:<9} | {sb:>4}/{sg:<11} | "
          + " | ".join(row))
PY
