#!/usr/bin/env bash
# Split-K on the GPU: the gpu-marked split-K tests, the K-heavy variants of benchmarks/split_k.py
# built, verified and timed against cuBLAS in the same run, Triton at the same sizes,
# compute-sanitizer on a small split-K function of each kind, and ncu on PROFILE.
# Usage (device machine, repository root): OUT=out bash benchmarks/device_split_k.sh
# Env: ONLY (a substring of the variants built), BENCH=0, TRITON=0, SANITIZE=0, TESTS=0 skip steps;
# PROFILE="f1 f2" functions for ncu (default none); DEPENDENT (a substring of function names):
# those timed with and without programmatic dependent launch (benchmarks/dependent_launch.py).
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -m gpu tests/test_split_k.py -p no:cacheprovider 2>&1 | tail -4 | tee "$OUT/tests.log"
fi
HAT=hat_packages/split_k/split_k.hat
python3 benchmarks/split_k.py hat_packages --only "${ONLY:-}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
timeout 400 python3 -m schedc verify "$HAT" 2>&1 | tee "$OUT/verify.log" | grep -vE "^\s*$" | tail -25
if [ "${BENCH:-1}" = 1 ]; then
  timeout 500 python3 -m schedc bench "$HAT" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
    --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
  grep -E "ratio|rror|wrong|Error" "$OUT/bench.log" | sed 's/cuBLAS.*time \/ //' | head -40
fi
if [ -n "${DEPENDENT:-}" ]; then  # the same functions launched as dependents and in plain stream order
  timeout 300 python3 benchmarks/dependent_launch.py "$HAT" --only "$DEPENDENT" 2>&1 | tee "$OUT/dependent.log"
fi
[ "${TRITON:-1}" = 1 ] && timeout 300 python3 benchmarks/triton_matmul.py 1024,1024,14336:fp16 1024,1024,14336:bf16 \
  2048,2048,16384:fp16 2048,2048,16384:bf16 512,4096,14336:fp16 512,4096,14336:bf16 2>&1 | tee "$OUT/triton.log" | tail -7
if [ "${SANITIZE:-1}" = 1 ]; then
  python3 - > "$OUT/sanitize_build.log" 2>&1 <<'PY'
import sys; sys.path[:0] = ["tests", "samples", "."]
import schedc as acc
from tests.test_split_k import PLANS
package = acc.Package()
for name in ("simt", "wmma_relu", "mma_sync_shared_cached_c", "wgmma_persistent_relu"):
    package.add(*PLANS[name][0](), base_name=name)
package.build("split_small", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/split_small")
PY
  for tool in memcheck racecheck synccheck initcheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m schedc verify \
      hat_packages/split_small/split_small.hat > "$OUT/sanitize_$tool.log" 2>&1
    echo "$tool exit $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | head -2 | tr '\n' ' ')"
  done
fi
for f in ${PROFILE:-}; do
  timeout 180 ncu --kernel-name "regex:${f}__" --launch-count 2 --section SpeedOfLight \
    python3 -m schedc bench "$HAT" --function "$f" --min-time 0.01 > "$OUT/ncu_$f.txt" 2>&1
  echo "ncu $f:"; grep -E "Duration|Throughput|partial|combine" "$OUT/ncu_$f.txt" | head -20
done
