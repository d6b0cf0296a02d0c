#!/usr/bin/env bash
# schedc inside PyTorch on the GPU: the gpu-marked tests of the call path and the operators
# (tests/test_torch_ops.py, tests/test_fast_call.py; the operators' C++ kernel is built against
# the device's torch at the first custom_op, its build time printed), then
# benchmarks/call_overhead.py (wall time per call: the function, the operator eagerly, inside
# torch.compile with its kernel in C++ and in Python, CUDA graphs; torch and Triton beside).
# Usage (device machine, repository root): OUT=out bash benchmarks/device_torch.sh   (RUNS=N repeats
# the benchmark N times, 2 unless given; TESTS=0 skips the tests)
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export SCHEDC_CACHE=${SCHEDC_CACHE:-/tmp/schedc-cache}
python3 -c "import time, torch; from schedc.package import native; t = time.time(); m = native.torch_ops()
print('torchop built and loaded:', m is not None, native.reason(), f'{time.time() - t:.1f} s')" 2>&1 | tail -30
if [ "${TESTS:-1}" = 1 ]; then
  timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_torch_ops.py tests/test_fast_call.py 2>&1 \
    | tee "$OUT/tests.log" | tail -15
fi
for run in $(seq "${RUNS:-2}"); do
  timeout 300 python3 benchmarks/call_overhead.py ${CALLS:+--calls $CALLS} 2>&1 | tee "$OUT/call_overhead_$run.log" | grep -v "^\s*$" | tail -30
done
