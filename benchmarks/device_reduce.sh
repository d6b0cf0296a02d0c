#!/usr/bin/env bash
# Reductions across threads on the device: the gpu-marked tests (tests/test_reduce.py), racecheck
# and synccheck of them, samples/gemv.py, softmax.py and layernorm.py built and timed against cuBLAS
# and torch (benchmarks/gemv.py, benchmarks/softmax.py).
# Usage (on the device machine, from the repository root): bash benchmarks/device_reduce.sh
set -uo pipefail
source benchmarks/device_env.sh
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_reduce.py ${EXTRA_TESTS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8
sanitize tests/test_reduce.py
for sample in gemv softmax layernorm; do
  python3 -m schedc build samples/$sample.py --output-dir hat_packages 2>&1 | tail -1
done
python3 benchmarks/gemv.py hat_packages/gemv 2>&1 | tee "$OUT/gemv.txt"
python3 benchmarks/softmax.py hat_packages 2>&1 | tee "$OUT/softmax.txt"
