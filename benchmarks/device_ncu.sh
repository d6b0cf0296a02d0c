#!/usr/bin/env bash
# ncu of named functions beside their cuBLAS references (benchmarks/ncu_headlines.py), on the GPU
# machine: PACKAGE=path/to/x.hat FUNCTIONS=fn1,fn2 bash benchmarks/device_ncu.sh
# One launch each, every kernel in its NVTX range; the table goes to $OUT/ncu.md, ncu's CSV to
# $OUT/ncu.csv.
source "$(dirname "$0")/device_env.sh"
: "${PACKAGE:?PACKAGE=... .hat}" "${FUNCTIONS:?FUNCTIONS=fn1,fn2}"
ranges=()
for fn in ${FUNCTIONS//,/ }; do ranges+=(--nvtx-include "schedc:$fn/" --nvtx-include "cublas:$fn/"); done
ncu --nvtx "${ranges[@]}" --print-nvtx-rename kernel --csv --page raw \
    --metrics "$(python3 benchmarks/ncu_headlines.py metrics)" \
    python3 benchmarks/ncu_headlines.py launch "$PACKAGE" "$FUNCTIONS" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?"; tail -3 "$OUT/ncu.err"
python3 benchmarks/ncu_headlines.py report "$OUT/ncu.csv" | tee "$OUT/ncu.md"
