#!/usr/bin/env bash
# Hopper plans at the edges on the device: the gpu-marked Hopper tests (the edge plans checked
# against the reference and element for element against the emulator), compute-sanitizer on
# the edge plans, and the random tester's Hopper draws verified on the GPU (every accepted
# program against the reference and the emulator; every program the emulator refuses run on
# the GPU all the same).
# Usage (device machine, repository root, wheels in .whl): bash benchmarks/device_edges.sh
# Environment: GPU_TESTS (the Hopper test files; tests/ for all), FUZZ_COUNT (800), FUZZ_SEED (4600),
# FUZZ_JOBS (14), SANITIZE (1). Logs to $OUT.
set -uo pipefail
OUT=${OUT:-device_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  [ -d /tmp/site/islpy ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider -m gpu ${GPU_TESTS:-tests/test_hopper_edges.py tests/test_hopper.py \
  tests/test_persistent.py tests/test_cluster.py} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8
if [ "${SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== $tool" | tee -a "$OUT/sanitizer.log"
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
      -m gpu tests/test_hopper_edges.py 2>&1 | tee -a "$OUT/sanitizer.log" | tail -3
  done
fi
python3 -m tests.fuzz --count "${FUZZ_COUNT:-800}" --seed "${FUZZ_SEED:-4600}" --kind hopper --jobs "${FUZZ_JOBS:-14}" \
  --gpu --coverage --shrink-seconds 120 --out "$OUT/fuzz" 2>&1 | tee "$OUT/fuzz.log" | tail -60
