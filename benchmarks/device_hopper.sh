#!/usr/bin/env bash
# The Hopper samples on the GPU (samples/hopper_matmul.py): build, verify every function, time
# them against cuBLAS in the same run, Triton's matmul at the same sizes, the SASS (HGMMA,
# UTMALDG), compute-sanitizer on the tutorial shape, and ncu on FUNCTION_PROFILE.
# Usage (device machine, repository root): OUT=out bash benchmarks/device_hopper.sh
# Env: BENCH=0 skips timing, TRITON=0 skips Triton, SANITIZE=0 skips compute-sanitizer,
# PROFILE="f1 f2" functions for ncu (default matmul_fp16_4096), SCRIPT another build script
# (SCRIPT_ARGS its arguments; BUILD=0 uses the carried hat_packages/<script>), VERIFY_EXCLUDE a regex of functions not verified (their float64
# reference on the CPU takes minutes at 8192^3).
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
SCRIPT=${SCRIPT:-samples/hopper_matmul.py}
NAME=$(basename "$SCRIPT" .py)
HAT=hat_packages/$NAME/$NAME.hat
if [ "${BUILD:-1}" = 1 ]; then  # BUILD=0: the package was built on the CPU and carried
  python3 "$SCRIPT" ${SCRIPT_ARGS:-} > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
cuobjdump -sass hat_packages/$NAME/$NAME.cubin > "$OUT/sass.txt" 2>&1
echo "SASS: HGMMA $(grep -c HGMMA "$OUT/sass.txt"), UTMALDG $(grep -c UTMALDG "$OUT/sass.txt"), HMMA $(grep -c 'HMMA' "$OUT/sass.txt")"
if [ -n "${VERIFY_EXCLUDE:-}" ]; then
  for f in $(python3 -c "import json,sys; print(*json.load(open(sys.argv[1]))['functions'])" "${HAT%.hat}.schedc.json" \
             | tr ' ' '\n' | grep -vE "$VERIFY_EXCLUDE"); do
    timeout 120 python3 -m schedc verify "$HAT" --function "$f" 2>&1 | grep -vE "^\s*$" | tail -2
  done | tee "$OUT/verify.log"
else
  timeout 300 python3 -m schedc verify "$HAT" 2>&1 | tee "$OUT/verify.log" | grep -vE "^\s*$" | tail -12
fi
if [ "${BENCH:-1}" = 1 ]; then
  timeout 400 python3 -m schedc bench "$HAT" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
    ${FUNCTION:+--function $FUNCTION} --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
  grep -E "ratio|rror|wrong|Error" "$OUT/bench.log" | sed 's/cuBLAS.*time \/ //' | head -20
fi
[ "${TRITON:-1}" = 1 ] && timeout 300 python3 benchmarks/triton_matmul.py ${TRITON_PROBLEMS:-} 2>&1 | tee "$OUT/triton.log" | tail -8
if [ "${SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m schedc verify "$HAT" \
      --function "${SANITIZE_FUNCTION:-matmul_fp16_2048x1024x2048}" > "$OUT/sanitize_$tool.log" 2>&1
    echo "$tool exit $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | head -2 | tr '\n' ' ')"
  done
fi
METRICS=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed
METRICS=$METRICS,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
for s in long_scoreboard barrier wait math_pipe_throttle sleeping short_scoreboard selected no_instruction membar; do
  METRICS=$METRICS,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
for f in ${PROFILE:-matmul_fp16_4096}; do
  timeout 180 ncu --kernel-name "regex:${f}__" --launch-count 1 --metrics "$METRICS" \
    python3 -m schedc bench "$HAT" --function "$f" --min-time 0.01 > "$OUT/ncu_$f.txt" 2>&1
  echo "ncu $f:"; grep -E "stalled|pct" "$OUT/ncu_$f.txt" | awk '{print "  " $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
