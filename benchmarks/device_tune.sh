#!/usr/bin/env bash
# schedc tune on the device: the tuner's tests (the GPU one included), then for each shape of
# $SHAPES a tune of samples/tune_matmul.py's $FUNCTION with a budget of $BUDGET points beside
# cuBLAS (table, plot, package in $OUT), its rerun from the database, and the database as CSV.
# Usage (on the device, from the repository root): bash benchmarks/device_tune.sh
source benchmarks/device_env.sh
export SCHEDC_CACHE=/tmp/schedc-cache
SCHEDC="python3 -m schedc"
[ -n "${SKIP_TESTS-}" ] || python3 -m pytest -q -p no:cacheprovider tests/test_tune.py 2>&1 | tail -3
for shape in ${SHAPES:-M=4096,N=4096,K=4096}; do
  name=${FUNCTION:-matmul_fp16}_$(echo "$shape" | tr -d 'MNK=' | tr ',' 'x')
  args=(samples/tune_matmul.py --function "${FUNCTION:-matmul_fp16}" --shapes "$shape" --budget-points "${BUDGET:-200}"
        --compare cublas --no-progress --top "${TOP:-12}" --output-dir "$OUT/pkg_$name")
  $SCHEDC tune "${args[@]}" --plot "$OUT/tune_$name.png" 2>&1 | tee "$OUT/tune_$name.txt"
  echo "== rerun from the database" | tee -a "$OUT/tune_$name.txt"
  $SCHEDC tune "${args[@]}" 2>&1 | head -2 | tee -a "$OUT/tune_$name.txt"
done
$SCHEDC tune --csv "$OUT/tune.csv"
