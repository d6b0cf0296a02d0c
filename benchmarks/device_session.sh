#!/usr/bin/env bash
# One device session: install carried wheels, build the samples, verify them on the GPU, run
# the gpu-marked tests, and benchmark each sample against cuBLAS in the same run.
# Usage (on the device machine, from the repository root): bash benchmarks/device_session.sh
# Environment: SAMPLES (built and verified), BENCH (SAMPLE or SAMPLE:REFERENCE, timed; "" skips),
# RUN_TESTS=1 (gpu-marked tests), SANITIZE=1 (memcheck), RACECHECK=1 (racecheck and synccheck on
# the variant matrix; RACECHECK_K narrows it, a pytest -k expression), SASS=1 (instruction mix per
# kernel), MIN_TIME (seconds per timing), RACECHECK_SAMPLES (SAMPLE or SAMPLE:FUNCTION: its verify
# runs, at full size, under each of SAMPLE_TOOLS, "racecheck synccheck" unless set, for at most
# SANITIZER_TIMEOUT seconds; these run last, so that a slow one cannot cost the benchmarks).
# Writes logs and bench.csv to $OUT (or ./device_out when OUT is unset).
set -uo pipefail
OUT=${OUT:-device_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -d .whl ]; then  # once per machine (parallel sessions share /tmp/site)
  [ -d /tmp/site/islpy ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import sys, numpy, torch, islpy; from cuda.bindings import nvrtc; print(sys.version.split()[0], numpy.__version__, torch.__version__, nvrtc.nvrtcVersion())"
SCHEDC="python3 -m schedc"
# BENCH entries are SAMPLE or SAMPLE:REFERENCE (cublas by default; copy, torch)
for s in ${SAMPLES:-hello_matmul tensor_matmul tensor_matmul_tf32} ${BENCH-}; do
  s=${s%%:*}
  [ -f hat_packages/$s/$s.hat ] || $SCHEDC build samples/$s.py --output-dir hat_packages || exit 1
done
for s in ${SAMPLES:-hello_matmul tensor_matmul tensor_matmul_tf32}; do
  $SCHEDC verify hat_packages/$s/$s.hat 2>&1 | tee -a "$OUT/verify.log"
done
if [ "${SANITIZE:-0}" = 1 ]; then  # memcheck of one launch per sample (cuda-bindings probing driver entry points is not a kernel fault)
  for s in ${SAMPLES:-hello_matmul tensor_matmul tensor_matmul_tf32}; do
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $SCHEDC verify hat_packages/$s/$s.hat 2>&1 \
      | tee -a "$OUT/sanitizer.log" | tail -3
  done
fi
if [ "${RACECHECK:-0}" = 1 ]; then  # racecheck and synccheck on the gpu-marked variant matrix (small sizes)
  for tool in racecheck synccheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k "${RACECHECK_K:-variant}" 2>&1 \
      | tee -a "$OUT/sanitizer_$tool.log" | tail -4
  done
fi
if [ "${SASS:-0}" = 1 ]; then  # instruction mix per kernel: shared loads, cp.async, tensor-core ops, barriers
  for s in ${SAMPLES:-hello_matmul tensor_matmul tensor_matmul_tf32}; do
    for cubin in hat_packages/$s/*.cubin; do
      cuobjdump -sass "$cubin" | awk -v f="$cubin" '/Function :/ {name=$3} /LDSM|LDS|LDGSTS|HMMA|BAR|LDG|STG/ {
        for (i = 1; i <= NF; i++) if ($i ~ /^(LDSM|LDS|LDGSTS|HMMA|BAR|LDG|STG)/) { split($i, op, "."); n[name" "op[1]]++ } }
        END { for (k in n) print k, n[k] }' | sort | tee -a "$OUT/sass.txt"
    done
  done
fi
if [ "${RUN_TESTS:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
fi
for entry in ${BENCH-hello_matmul tensor_matmul tensor_matmul_tf32}; do  # BENCH="" skips
  s=${entry%%:*}; reference=cublas; [ "$s" != "$entry" ] && reference=${entry#*:}
  $SCHEDC bench hat_packages/$s/$s.hat --compare $reference --time-in-ms --min-time ${MIN_TIME:-1} \
    --csv "$OUT/bench.csv" 2>&1 | tee -a "$OUT/bench.log"
done
for entry in ${RACECHECK_SAMPLES-}; do  # shared-memory hazards of the samples themselves, at full size
  s=${entry%%:*}; only=(); [ "$s" != "$entry" ] && only=(--function "${entry#*:}")
  [ -f hat_packages/$s/$s.hat ] || $SCHEDC build samples/$s.py --output-dir hat_packages || exit 1
  for tool in ${SAMPLE_TOOLS:-racecheck synccheck}; do
    start=$SECONDS
    echo "== $tool $entry" | tee -a "$OUT/sanitizer_samples.log"
    timeout ${SANITIZER_TIMEOUT:-900} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $SCHEDC verify hat_packages/$s/$s.hat \
      "${only[@]}" 2>&1 | tee -a "$OUT/sanitizer_samples.log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" | tail -2
    rc=${PIPESTATUS[0]}; [ "$rc" = 124 ] && rc="124, timed out"
    echo "   $tool $entry: $((SECONDS - start)) s, exit $rc" | tee -a "$OUT/sanitizer_samples.log"
  done
done
