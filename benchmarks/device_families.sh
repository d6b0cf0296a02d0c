#!/usr/bin/env bash
# Time benchmarks/families.py on the GPU: every function verified and benchmarked against cuBLAS
# in the same run, Triton's matmul at the same sizes, and ncu's stall reasons and shared-memory
# bank conflicts for the functions in PROFILE (default v4_fp16_mma).
# Usage (on the device machine, from the repository root): bash benchmarks/device_families.sh
# Writes build.log, bench.log, bench.csv, triton.log and ncu_<function>.txt to $OUT (./device_out).
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
python3 benchmarks/families.py hat_packages > "$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
python3 -m schedc bench hat_packages/families/families.hat --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
  ${FUNCTION:+--function $FUNCTION} --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
grep -E "ratio|rror|wrong" "$OUT/bench.log" | sed 's/cuBLAS.*time \/ //'
[ "${TRITON:-1}" = 1 ] && python3 benchmarks/triton_matmul.py ${TRITON_PROBLEMS:-} 2>&1 | tee "$OUT/triton.log" | tail -8
STALLS=barrier,long_scoreboard,short_scoreboard,mio_throttle,math_pipe_throttle,wait,not_selected,dispatch_stall,lg_throttle,selected,no_instruction,branch_resolving
METRICS=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
METRICS=$METRICS,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for s in ${STALLS//,/ }; do METRICS=$METRICS,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio; done
for f in ${PROFILE:-v4_fp16_mma}; do
  timeout 180 ncu --kernel-name "regex:${f}__" --launch-count 1 --metrics "$METRICS" \
    python3 -m schedc bench hat_packages/families/families.hat --function "$f" --min-time 0.01 > "$OUT/ncu_$f.txt" 2>&1
  echo "ncu $f:"; grep -E "stalled|bank|wavefronts|pct" "$OUT/ncu_$f.txt" | awk '{print "  " $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
