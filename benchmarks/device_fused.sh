#!/usr/bin/env bash
# Fused epilogues on the device: the gpu-marked tests of fused schedules (SIMT, mma.sync, wgmma),
# racecheck and synccheck of them, the fused_gemm sample built, verified (schedc verify) and
# timed against the plain plan and torch (benchmarks/fused_gemm.py).
# Usage (on the device machine, from the repository root): bash benchmarks/device_fused.sh
set -uo pipefail
source benchmarks/device_env.sh
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_fuse.py ${EXTRA_TESTS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8
sanitize tests/test_fuse.py "${SANITIZE_K:-gpu}"
python3 -m schedc build samples/fused_gemm.py --output-dir hat_packages 2>&1 | tail -2
python3 benchmarks/fused_gemm.py hat_packages/fused_gemm 2>&1 | tee "$OUT/fused_gemm.txt"
