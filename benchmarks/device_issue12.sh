#!/usr/bin/env bash
# The device run behind BENCHMARKS.md's instruction-family entry: the gpu-marked tests, every
# tensor-core sample verified and timed against cuBLAS, benchmarks/families.py with Triton beside
# it, and the samples' sanitizer runs. Usage (on the device machine, from the repository root):
#   OUT=device_out PART=samples bash benchmarks/device_issue12.sh   (then PART=families; each
# fits one 10-minute device call)
set -uo pipefail
OUT=${OUT:-device_out}; mkdir -p "$OUT"
if [ "${PART:-samples}" = samples ]; then
S="tensor_matmul tensor_matmul_tf32 tensor_matmul_output_cache tensor_input_cache tensor_input_double_buffer_cache"
S="$S tensor_input_output_cache tensor_ladder_tf32 tilus_matmul odd_sizes hello_matmul simt_register_tile"
SAMPLES="$S" BENCH="$S" RUN_TESTS=${RUN_TESTS:-1} MIN_TIME=0.3 \
  RACECHECK_SAMPLES="tilus_matmul:matmul_v4_s3 odd_sizes:matmul_1000_fp16 tensor_input_cache" \
  SAMPLE_TOOLS="memcheck racecheck synccheck" SANITIZER_TIMEOUT=200 bash benchmarks/device_session.sh > "$OUT/session.log" 2>&1
grep -E "passed|failed" "$OUT/pytest_gpu.log" | tail -1
grep -E "^ratio|MISMATCH" "$OUT/bench.log" | sed 's/cuBLAS.*time \/ //'
grep -E "^== |exit|SUMMARY" "$OUT/sanitizer_samples.log"
else
TRITON_PROBLEMS="4096,4096,4096:fp16 4096,4096,4096:bf16 4096,4096,4096:tf32 2048,1024,2048:fp16 2048,1024,2048:tf32" \
  PROFILE="${PROFILE:-v4_fp16_mma fp16_mma_b128x128x32_w64x64_s3}" bash benchmarks/device_families.sh
fi
