#!/usr/bin/env bash
# Run-time sizes on the device: the gpu-marked tests of tests/test_runtime_sizes.py, memcheck, racecheck
# and synccheck of them (M = 1 and partial tiles included), samples/runtime_m.py built, checked against
# torch at M = 1, 7, 16, 100, 4096 and timed against cuBLAS and the fixed-M plan (benchmarks/runtime_m.py).
# Usage (on the device machine, from the repository root): bash benchmarks/device_runtime.sh
set -uo pipefail
source benchmarks/device_env.sh
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_runtime_sizes.py ${EXTRA_TESTS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8
sanitize tests/test_runtime_sizes.py "every"
python3 -m schedc build samples/runtime_m.py --output-dir hat_packages 2>&1 | tail -1
python3 benchmarks/runtime_m.py hat_packages/runtime_m 2>&1 | tee "$OUT/runtime_m.txt"
