#!/usr/bin/env bash
# Time the same functions from two or more builds of a package side by side, each against cuBLAS
# in the same run: an A/B comparison of a code-generation change without a rebuild on the device.
# Build the packages here (nvcc makes the .so), e.g. the package at the previous commit in
# bench_pkgs/before and the working tree's in bench_pkgs/after, then on the device machine:
#   PACKAGES="bench_pkgs/before/hopper_tiles/hopper_tiles.hat bench_pkgs/after/hopper_tiles/hopper_tiles.hat" \
#   OUT=out bash benchmarks/device_compare.sh
# Env: FUNCTIONS (names to time; every function of the first package unless set), ROUNDS (the
# packages alternate this many times, 1 unless set, so that drift shows), MIN_TIME (0.3),
# PROFILE ("PACKAGE:FUNCTION ..." profiled with ncu after the timing).
# Writes $OUT/compare.csv (round, package, function, schedc ms, cuBLAS ms, ratio) and the logs.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
set -- ${PACKAGES:?PACKAGES names the .hat files to compare}
FUNCTIONS=${FUNCTIONS:-$(python3 -c "import json,sys; print(*json.load(open(sys.argv[1]))['functions'])" "${1%.hat}.schedc.json")}
ROW='import csv, sys
from pathlib import Path
log, head = sys.argv[1], sys.argv[2:5]
rows = list(csv.DictReader(open(log + ".csv"))) if Path(log + ".csv").exists() else []
if len(rows) < 2:
    lines = Path(log + ".log").read_text().strip().splitlines()
    print(",".join([*head, "", "", "FAILED: " + (lines[-1].replace(",", ";") if lines else "no output")]))
else:
    ratio = float(rows[0]["ratio_to_reference"])
    print(",".join([*head, rows[0]["median_of_means"], rows[1]["median_of_means"], f"{ratio:.3f}"]))'
echo "round,package,function,schedc_ms,cublas_ms,ratio" > "$OUT/compare.csv"
for round in $(seq "${ROUNDS:-1}"); do
  for f in $FUNCTIONS; do
    for hat in "$@"; do
      log="$OUT/bench_${round}_$(echo "$hat" | tr '/' '_')_$f"
      timeout 120 python3 -m schedc bench "$hat" --function "$f" --compare cublas --time-in-ms \
        --min-time "${MIN_TIME:-0.3}" --csv "$log.csv" > "$log.log" 2>&1
      python3 -c "$ROW" "$log" "$round" "$hat" "$f" >> "$OUT/compare.csv"
      tail -1 "$OUT/compare.csv"
    done
  done
done
METRICS=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed
METRICS=$METRICS,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum
for s in long_scoreboard barrier wait math_pipe_throttle sleeping short_scoreboard selected no_instruction membar lg_throttle; do
  METRICS=$METRICS,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
for item in ${PROFILE:-}; do
  hat=${item%%:*}; f=${item#*:}
  report="$OUT/ncu_$(echo "$hat" | tr '/' '_')_$f.txt"
  timeout 180 ncu --kernel-name "regex:${f}__" --launch-count 1 --metrics "$METRICS" \
    python3 -m schedc bench "$hat" --function "$f" --min-time 0.01 > "$report" 2>&1
  echo "ncu $hat $f:"
  grep -E "stalled|pct|sectors" "$report" | awk '{print "  " $1, $NF}' \
    | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
