#!/usr/bin/env bash
# Consumer teams against the cooperative plan on the GPU (benchmarks/ping_pong.py, built on the CPU
# and carried as hat_packages/ping_pong): the gpu-marked tests of teams and of 8-bit floats on
# mma.sync, verify and time both kinds of plan beside cuBLAS, then ncu's speed-of-light and memory
# sections (shared memory's load against the tensor pipe's) for one plan of each kind.
# Usage (device machine, repository root): OUT=out bash benchmarks/device_ping_pong.sh
# Env: TESTS=0 skips the tests, BENCH=0 the timing, PROFILE="f1 f2" the functions for ncu, FUZZ=N
# also runs N random Hopper and N random tensor-core programs on the GPU (teams and fp8 mma.sync drawn),
# FUZZ_TIMEOUT seconds each (400); the SASS of the profiled functions lands in $OUT/sass_F.txt.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export SCHEDC_CACHE=${SCHEDC_CACHE:-/tmp/schedc-cache}
HAT=hat_packages/ping_pong/ping_pong.hat
[ -f "$HAT" ] || python3 benchmarks/ping_pong.py > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_hopper.py tests/test_split_k.py \
    tests/test_float8.py -k "ping_pong or teams or mma_sync" 2>&1 | tee "$OUT/tests.log" | tail -3
fi
if [ "${FUZZ:-0}" -gt 0 ]; then
  for kind in hopper tensor; do
    timeout "${FUZZ_TIMEOUT:-400}" python3 -m tests.fuzz --count "$FUZZ" --seed 27 --jobs 14 --gpu --kind $kind 2>&1 \
      | tee "$OUT/fuzz_$kind.log" | tail -2
  done
fi
if [ "${BENCH:-1}" = 1 ]; then
  timeout 420 python3 -m schedc bench "$HAT" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.5}" \
    --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
  grep -E "ratio|rror|wrong" "$OUT/bench.log" | sed 's/cuBLAS.*time \/ //'
fi
for f in ${PROFILE:-fp16_4096_coop_b128x256x64_s3_p4 fp16_4096_pp_b128x128x64_s4_p8}; do
  timeout 180 ncu --kernel-name "regex:${f}__" --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis \
    python3 -m schedc bench "$HAT" --function "$f" --min-time 0.01 > "$OUT/ncu_$f.txt" 2>&1
  cuobjdump -sass -fun "${f}__gpu__" "${HAT%.hat}.cubin" > "$OUT/sass_$f.txt" 2>&1
  echo "ncu $f ($(grep -c '^ */\*[0-9a-f]*\*/' "$OUT/sass_$f.txt") SASS instructions):"; grep -E "Throughput|Shared|Bank|Stall|Warp Cycles|Executed Ipc|Instructions|Pipe|Duration|Frequency" "$OUT/ncu_$f.txt" | head -40 | sed 's/^/  /'
done
