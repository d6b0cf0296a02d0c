#!/usr/bin/env bash
# The device machine's one entry point (on it, from the repository root):
#   bash benchmarks/device_session.sh [MODE]        (or MODE=... in the environment; samples unless given)
# Every mode first installs the carried wheels (.whl, once per machine, into /tmp/site, put on
# PYTHONPATH), writes the GPU's name, driver and clocks to $OUT/gpu.txt and prints the Python,
# numpy, torch and NVRTC versions. Logs, CSV files and ncu reports go to $OUT (./device_out unless
# set). `bash benchmarks/device_session.sh help` prints this text.
#
# Modes:
#   samples    build the samples, verify them, the gpu-marked tests, each sample timed against its reference
#   compare    the same functions of two or more builds of a package timed side by side (A/B of a change)
#   ncu        ncu of named functions beside their cuBLAS kernels (benchmarks/ncu_headlines.py)
#   hopper     a Hopper build script (samples/hopper_matmul.py): SASS, verify, timing, Triton, sanitizers, ncu
#   families   benchmarks/families.py timed against cuBLAS, Triton beside it, ncu stalls and bank conflicts
#   split_k    benchmarks/split_k.py: tests, verify, timing, dependent launch, Triton, sanitizers, ncu
#   ping_pong  benchmarks/ping_pong.py: tests of teams and fp8 mma.sync, random programs, timing, ncu sections
#   edges      the gpu-marked Hopper tests, sanitizers on the edge plans, the random tester's Hopper draws on the GPU
#   fused      tests/test_fuse.py on the GPU and under the sanitizers, samples/fused_gemm.py against torch
#   attention  the chain's, the online softmax's and the split keys' tests on the GPU and under the sanitizers, the
#              attention sample's registers and spills, benchmarks/attention.py against torch's SDPA
#   reduce     tests/test_reduce.py on the GPU and under the sanitizers, gemv, softmax, layernorm against torch
#   runtime    tests/test_runtime_sizes.py on the GPU and under the sanitizers, samples/runtime_m.py timed
#   torch      the torch operators' tests, benchmarks/call_overhead.py (the call from PyTorch)
#   tune       the tuner's tests, then schedc tune of samples/tune_matmul.py beside cuBLAS
#
# Switches read by every mode that has the step: TESTS=0 skips the gpu-marked tests, BENCH=0 the
# timing, TRITON=0 Triton's matmul, SANITIZE=0 compute-sanitizer (on by default; in samples mode
# off unless SANITIZE=1); MIN_TIME sets the seconds of each timing; PROFILE names the functions
# profiled with ncu. The gpu-marked tests' log is $OUT/pytest_gpu.log in every mode.
#
# samples:  SAMPLES (built and verified; hello_matmul tensor_matmul tensor_matmul_tf32), BENCH (SAMPLE
#   or SAMPLE:REFERENCE, REFERENCE cublas, copy or torch, timed; the samples unless set; "" or 0
#   skips), RUN_TESTS=0 (or TESTS=0) skips tests/ on the GPU, SANITIZE=1 (memcheck of each sample's
#   verify), RACECHECK=1 (racecheck and synccheck on tests/test_gpu.py's variant matrix; RACECHECK_K
#   narrows it, a pytest -k expression), SASS=1 (instruction mix per kernel), MIN_TIME (1),
#   RACECHECK_SAMPLES (SAMPLE or SAMPLE:FUNCTION: its verify, at full size, under each of
#   SAMPLE_TOOLS, "racecheck synccheck" unless set, for at most SANITIZER_TIMEOUT seconds, 900;
#   these run last, so that a slow one cannot cost the benchmarks). Writes verify.log, bench.csv,
#   bench.log, pytest_gpu.log, sanitizer*.log, sass.txt.
# compare:  PACKAGES (the .hat files, e.g. bench_pkgs/before/X/X.hat bench_pkgs/after/X/X.hat, built
#   on the CPU machine with nvcc), FUNCTIONS (every function of the first package unless set),
#   ROUNDS (the packages alternate this many times, 1, so that drift shows), MIN_TIME (0.3), PROFILE
#   ("PACKAGE:FUNCTION ...", ncu stalls after the timing). Writes compare.csv (round, package,
#   function, schedc ms, cuBLAS ms, ratio) and a log per timing.
# ncu:      PACKAGE (a .hat), FUNCTIONS (fn1,fn2): each verified, then launched once beside its cuBLAS
#   reference, each kernel in its NVTX range. Writes ncu.csv (ncu's) and ncu.md (the table).
# hopper:   SCRIPT (samples/hopper_matmul.py; another build script writing hat_packages/<name>),
#   SCRIPT_ARGS, BUILD=0 (use the carried hat_packages/<name>), VERIFY_EXCLUDE (a regex of functions
#   not verified by schedc verify: the float64 reference of 8192^3 takes minutes on the CPU),
#   FUNCTION (time only this one), MIN_TIME (0.3), TRITON_PROBLEMS (benchmarks/triton_matmul.py's
#   arguments), SANITIZE_FUNCTION (matmul_fp16_2048x1024x2048, under memcheck, racecheck and
#   synccheck), PROFILE (matmul_fp16_4096). Writes build.log, sass.txt, verify.log, bench.csv,
#   bench.log, triton.log, sanitize_<tool>.log, ncu_<function>.txt.
# families: FUNCTION, MIN_TIME (0.3), TRITON_PROBLEMS, PROFILE (v4_fp16_mma). Writes build.log,
#   bench.log, bench.csv, triton.log, ncu_<function>.txt.
# split_k:  ONLY (a substring of the variants built), MIN_TIME (0.3), DEPENDENT (a substring of function
#   names: those timed with and without programmatic dependent launch, benchmarks/dependent_launch.py),
#   SANITIZE (1: a small split-K function of each kind under memcheck, racecheck, synccheck and
#   initcheck), PROFILE (none; ncu's SpeedOfLight). Writes build.log, verify.log,
#   bench.csv, bench.log, dependent.log, triton.log, sanitize_<tool>.log, ncu_<function>.txt.
# ping_pong: hat_packages/ping_pong built unless carried; FUZZ=N (also N random Hopper and N random
#   tensor-core programs on the GPU, FUZZ_TIMEOUT seconds each, 400), MIN_TIME (0.5), PROFILE (one
#   cooperative and one ping-pong plan: ncu's speed-of-light, memory, warp-state, instruction and
#   compute sections, and the function's SASS in sass_<function>.txt).
# edges:    GPU_TESTS (the Hopper test files; tests/ for all), SANITIZE (1), FUZZ_COUNT (800),
#   FUZZ_SEED (4600), FUZZ_JOBS (14): every accepted program checked against the reference and,
#   element for element, the emulator; every program the emulator refuses run on the GPU all the
#   same. Writes pytest_gpu.log, sanitizer_<tool>.log, fuzz.log and the shrunk failures in fuzz/.
# attention: BUILD=0 (time the carried hat_packages/attention and attention_variants, built here; 1: rebuild
#   both on the device), EXTRA_TESTS, SANITIZE (1: last, after the timing), TOOLS, VARIANTS (1: --variants),
#   ONLY (benchmarks/attention.py's --only), BEFORE (an output directory of the same packages built by another
#   compiler, carried: each function also timed as built there, NAME:before), NCU (function names: ncu's
#   headlines of each beside cuDNN's), NCU_SOURCE (function names: each's SASS and ncu's warp stalls a SASS
#   instruction, source_FN.csv and its summary by benchmarks/ncu_source.py), B2B (1: benchmarks/b2b_gemm.py's softmax functions too), SANITIZE_K (the
#   pytest -k of the sanitized tests of tests/test_online.py and tests/test_split_keys.py). Writes
#   attention.txt, b2b.txt, resources.txt, ncu.md.
# fused, reduce, runtime: EXTRA_TESTS (more pytest arguments), SANITIZE (1), TOOLS (the sanitizer
#   tools, "memcheck racecheck synccheck"), SANITIZE_K (fused: the pytest -k of the sanitized tests).
# torch:    RUNS (2: call_overhead.py's runs), CALLS (its --calls). The operators' C++ kernel is built
#   against the device's torch first and its build time printed.
# tune:     SHAPES (M=4096,N=4096,K=4096; several, space-separated), FUNCTION (matmul_fp16), BUDGET
#   (200 points), TOP (12); TESTS=0 or SKIP_TESTS=1 skips tests/test_tune.py. Writes tune_<name>.txt
#   and .png, the package in pkg_<name>, the database as tune.csv.
#
# The lists in the environment (SAMPLES, PROFILE, TRITON_PROBLEMS, GPU_TESTS, ...) are split on spaces.
# shellcheck disable=SC2086
set -uo pipefail
MODES="samples compare ncu hopper families split_k ping_pong edges fused attention reduce runtime torch tune"
MODE=${1:-${MODE:-samples}}
case " $MODES help -h --help " in
  *" $MODE "*) ;;
  *) echo "device_session.sh: unknown mode '$MODE' (modes: $MODES; help)" >&2; exit 2 ;;
esac
if [ "$MODE" = help ] || [ "$MODE" = -h ] || [ "$MODE" = --help ]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0" | sed '/^shellcheck /d'
  exit 0
fi

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

# gpu_tests SECONDS PYTEST_ARGUMENT...: the gpu-marked tests (TESTS=0 skips them) for at most SECONDS
# (0: no limit), the log in $OUT/pytest_gpu.log, its last lines printed
gpu_tests() {
  [ "${TESTS:-1}" = 1 ] || return 0
  local seconds=$1; shift
  timeout "$seconds" python3 -m pytest -q -p no:cacheprovider -m gpu "$@" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
}
# sanitize TESTS [K]: each tool of $TOOLS (memcheck racecheck synccheck) over the gpu-marked tests in
# TESTS (those of -k K where K is given), each tool's summary printed, its log in $OUT/sanitizer_<tool>.log
sanitize() {
  local tool only=()
  [ -n "${2:-}" ] && only=(-k "$2")
  for tool in ${TOOLS-memcheck racecheck synccheck}; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m pytest -q -p no:cacheprovider -m gpu $1 "${only[@]}" 2>&1 \
      | tee "$OUT/sanitizer_$tool.log" | grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" | tail -3
  done
}
# sanitize_verify HAT VERIFY_OPTION...: schedc verify of HAT under memcheck, racecheck, synccheck (and
# $EXTRA_TOOLS), at most 240 s each, the logs in $OUT/sanitize_<tool>.log
sanitize_verify() {
  local hat=$1 tool; shift
  for tool in memcheck racecheck synccheck ${EXTRA_TOOLS:-}; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m schedc verify "$hat" "$@" \
      > "$OUT/sanitize_$tool.log" 2>&1
    echo "$tool exit $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | head -2 | tr '\n' ' ')"
  done
}
# bench_lines LOG [N]: the ratio and error lines of a schedc bench log (the first N)
bench_lines() { grep -E "ratio|rror|wrong" "$1" | sed 's/cuBLAS.*time \/ //' | head -n "${2:-1000}"; }
# stall_metrics METRICS STALL...: METRICS and the warps stalled per issued instruction of each STALL
stall_metrics() {
  local metrics=$1 s; shift
  for s; do metrics=$metrics,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio; done
  echo "$metrics"
}
# ncu_bench HAT FUNCTION REPORT NCU_OPTION...: ncu of FUNCTION's kernel in a short schedc bench of HAT
ncu_bench() {
  local hat=$1 f=$2 report=$3; shift 3
  timeout 180 ncu --kernel-name "regex:${f}__" "$@" \
    python3 -m schedc bench "$hat" --function "$f" --min-time 0.01 > "$report" 2>&1
}
# ncu_lines REPORT REGEX: the report's metrics that match, one "name value" a line
ncu_lines() {
  grep -E "$2" "$1" | awk '{print "  " $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
}
# triton SECONDS [PROBLEM...]: benchmarks/triton_matmul.py at those problems (its defaults unless given)
# for at most SECONDS (0: no limit); TRITON=0 skips it
triton() {
  [ "${TRITON:-1}" = 1 ] || return 0
  local seconds=$1; shift
  timeout "$seconds" python3 benchmarks/triton_matmul.py "$@" 2>&1 | tee "$OUT/triton.log" | tail -8
}

mode_samples() {
  local samples=${SAMPLES:-hello_matmul tensor_matmul tensor_matmul_tf32} s entry reference cubin only tool start rc
  [ "${BENCH-}" = 0 ] && BENCH=""
  # BENCH entries are SAMPLE or SAMPLE:REFERENCE (cublas by default; copy, torch)
  for s in $samples ${BENCH-}; do
    s=${s%%:*}
    [ -f hat_packages/$s/$s.hat ] || $SCHEDC build samples/$s.py --output-dir hat_packages || exit 1
  done
  for s in $samples; do
    $SCHEDC verify hat_packages/$s/$s.hat 2>&1 | tee -a "$OUT/verify.log"
  done
  if [ "${SANITIZE:-0}" = 1 ]; then  # memcheck of one launch per sample (cuda-bindings probing driver entry points is not a kernel fault)
    for s in $samples; do
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
    for s in $samples; do
      for cubin in hat_packages/"$s"/*.cubin; do
        cuobjdump -sass "$cubin" | awk -v f="$cubin" '/Function :/ {name=$3} /LDSM|LDS|LDGSTS|HMMA|BAR|LDG|STG/ {
          for (i = 1; i <= NF; i++) if ($i ~ /^(LDSM|LDS|LDGSTS|HMMA|BAR|LDG|STG)/) { split($i, op, "."); n[name" "op[1]]++ } }
          END { for (k in n) print k, n[k] }' | sort | tee -a "$OUT/sass.txt"
      done
    done
  fi
  TESTS=${RUN_TESTS:-${TESTS:-1}} gpu_tests 0 tests/
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
}

mode_compare() {
  set -- ${PACKAGES:?PACKAGES names the .hat files to compare}
  local functions round f hat log item report metrics s row
  functions=${FUNCTIONS:-$(python3 -c "import json,sys; print(*json.load(open(sys.argv[1]))['functions'])" "${1%.hat}.schedc.json")}
  row='import csv, sys
from pathlib import Path
log, head = sys.argv[1], sys.argv[2:5]
rows = list(csv.DictReader(open(log + ".csv"))) if Path(log + ".csv").exists() else []
if len(rows) < 2:
    lines = Path(log + ".log").read_text().strip().splitlines()
    print(",".join([*head, "", "", "FAILED: " + (lines[-1].replace(",", ";") if lines else "no output")]))
else:
    ratio = float(rows[0]["ratio_to_reference"])
    print(",".join([*head, rows[0]["median_of_means"], rows[1]["median_of_means"], f"{ratio:.3f}"]))'
  echo "round,package,function,schedc_ms,cublas_ms,ratio" > "$OUT/compare.csv"
  for round in $(seq "${ROUNDS:-1}"); do
    for f in $functions; do
      for hat in "$@"; do
        log="$OUT/bench_${round}_$(echo "$hat" | tr '/' '_')_$f"
        timeout 120 python3 -m schedc bench "$hat" --function "$f" --compare cublas --time-in-ms \
          --min-time "${MIN_TIME:-0.3}" --csv "$log.csv" > "$log.log" 2>&1
        python3 -c "$row" "$log" "$round" "$hat" "$f" >> "$OUT/compare.csv"
        tail -1 "$OUT/compare.csv"
      done
    done
  done
  metrics=$(stall_metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum \
    long_scoreboard barrier wait math_pipe_throttle sleeping short_scoreboard selected no_instruction membar lg_throttle)
  for item in ${PROFILE:-}; do
    hat=${item%%:*}; f=${item#*:}
    report="$OUT/ncu_$(echo "$hat" | tr '/' '_')_$f.txt"
    ncu_bench "$hat" "$f" "$report" --launch-count 1 --metrics "$metrics"
    echo "ncu $hat $f:"; ncu_lines "$report" "stalled|pct|sectors"
  done
}

mode_ncu() {
  : "${PACKAGE:?PACKAGE=... .hat}" "${FUNCTIONS:?FUNCTIONS=fn1,fn2}"
  local ranges=() fn
  for fn in ${FUNCTIONS//,/ }; do ranges+=(--nvtx-include "schedc:$fn/" --nvtx-include "cublas:$fn/"); done
  ncu --nvtx "${ranges[@]}" --print-nvtx-rename kernel --csv --page raw \
      --metrics "$(python3 benchmarks/ncu_headlines.py metrics)" \
      python3 benchmarks/ncu_headlines.py launch "$PACKAGE" "$FUNCTIONS" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  echo "ncu exit $?"; tail -3 "$OUT/ncu.err"
  python3 benchmarks/ncu_headlines.py report "$OUT/ncu.csv" | tee "$OUT/ncu.md"
}

mode_hopper() {
  local script=${SCRIPT:-samples/hopper_matmul.py} name hat f metrics
  name=$(basename "$script" .py)
  hat=hat_packages/$name/$name.hat
  if [ "${BUILD:-1}" = 1 ]; then  # BUILD=0: the package was built on the CPU and carried
    python3 "$script" ${SCRIPT_ARGS:-} > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  fi
  cuobjdump -sass "hat_packages/$name/$name.cubin" > "$OUT/sass.txt" 2>&1
  echo "SASS: HGMMA $(grep -c HGMMA "$OUT/sass.txt"), UTMALDG $(grep -c UTMALDG "$OUT/sass.txt"), HMMA $(grep -c 'HMMA' "$OUT/sass.txt")"
  if [ -n "${VERIFY_EXCLUDE:-}" ]; then
    for f in $(python3 -c "import json,sys; print(*json.load(open(sys.argv[1]))['functions'])" "${hat%.hat}.schedc.json" \
               | tr ' ' '\n' | grep -vE "$VERIFY_EXCLUDE"); do
      timeout 120 python3 -m schedc verify "$hat" --function "$f" 2>&1 | grep -vE "^\s*$" | tail -2
    done | tee "$OUT/verify.log"
  else
    timeout 300 python3 -m schedc verify "$hat" 2>&1 | tee "$OUT/verify.log" | grep -vE "^\s*$" | tail -12
  fi
  if [ "${BENCH:-1}" = 1 ]; then
    timeout 400 python3 -m schedc bench "$hat" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
      ${FUNCTION:+--function $FUNCTION} --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
    bench_lines "$OUT/bench.log" 20
  fi
  triton 300 ${TRITON_PROBLEMS:-}
  if [ "${SANITIZE:-1}" = 1 ]; then
    sanitize_verify "$hat" --function "${SANITIZE_FUNCTION:-matmul_fp16_2048x1024x2048}"
  fi
  metrics=$(stall_metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
    long_scoreboard barrier wait math_pipe_throttle sleeping short_scoreboard selected no_instruction membar)
  for f in ${PROFILE:-matmul_fp16_4096}; do
    ncu_bench "$hat" "$f" "$OUT/ncu_$f.txt" --launch-count 1 --metrics "$metrics"
    echo "ncu $f:"; ncu_lines "$OUT/ncu_$f.txt" "stalled|pct"
  done
}

mode_families() {
  local hat=hat_packages/families/families.hat f metrics
  python3 benchmarks/families.py hat_packages > "$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
  if [ "${BENCH:-1}" = 1 ]; then
    python3 -m schedc bench "$hat" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
      ${FUNCTION:+--function $FUNCTION} --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
    bench_lines "$OUT/bench.log"
  fi
  triton 0 ${TRITON_PROBLEMS:-}
  metrics=$(stall_metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active \
    barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected dispatch_stall lg_throttle selected no_instruction branch_resolving)
  for f in ${PROFILE:-v4_fp16_mma}; do
    ncu_bench "$hat" "$f" "$OUT/ncu_$f.txt" --launch-count 1 --metrics "$metrics"
    echo "ncu $f:"; ncu_lines "$OUT/ncu_$f.txt" "stalled|bank|wavefronts|pct"
  done
}

mode_split_k() {
  local hat=hat_packages/split_k/split_k.hat f
  gpu_tests 300 tests/test_split_k.py
  python3 benchmarks/split_k.py hat_packages --only "${ONLY:-}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  timeout 400 python3 -m schedc verify "$hat" 2>&1 | tee "$OUT/verify.log" | grep -vE "^\s*$" | tail -25
  if [ "${BENCH:-1}" = 1 ]; then
    timeout 500 python3 -m schedc bench "$hat" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.3}" \
      --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
    bench_lines "$OUT/bench.log" 40
  fi
  if [ -n "${DEPENDENT:-}" ]; then  # the same functions launched as dependents and in plain stream order
    timeout 300 python3 benchmarks/dependent_launch.py "$hat" --only "$DEPENDENT" 2>&1 | tee "$OUT/dependent.log"
  fi
  triton 300 1024,1024,14336:fp16 1024,1024,14336:bf16 2048,2048,16384:fp16 2048,2048,16384:bf16 \
    512,4096,14336:fp16 512,4096,14336:bf16
  if [ "${SANITIZE:-1}" = 1 ]; then  # one small split-K function of each kind
    python3 - > "$OUT/sanitize_build.log" 2>&1 <<'PY'
import sys; sys.path[:0] = ["tests", "samples", "."]
import schedc as acc
from tests.test_split_k import PLANS
package = acc.Package()
for name in ("simt", "wmma_relu", "mma_sync_shared_cached_c", "wgmma_persistent_relu"):
    package.add(*PLANS[name][0](), base_name=name)
package.build("split_small", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/split_small")
PY
    EXTRA_TOOLS=initcheck sanitize_verify hat_packages/split_small/split_small.hat
  fi
  for f in ${PROFILE:-}; do
    ncu_bench "$hat" "$f" "$OUT/ncu_$f.txt" --launch-count 2 --section SpeedOfLight
    echo "ncu $f:"; grep -E "Duration|Throughput|partial|combine" "$OUT/ncu_$f.txt" | head -20
  done
}

mode_ping_pong() {
  local hat=hat_packages/ping_pong/ping_pong.hat kind f
  export SCHEDC_CACHE=${SCHEDC_CACHE:-/tmp/schedc-cache}
  [ -f "$hat" ] || python3 benchmarks/ping_pong.py > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  gpu_tests 300 tests/test_hopper.py tests/test_split_k.py tests/test_float8.py -k "ping_pong or teams or mma_sync"
  if [ "${FUZZ:-0}" -gt 0 ]; then  # teams and fp8 mma.sync are among the draws
    for kind in hopper tensor; do
      timeout "${FUZZ_TIMEOUT:-400}" python3 -m tests.fuzz --count "$FUZZ" --seed 27 --jobs 14 --gpu --kind $kind 2>&1 \
        | tee "$OUT/fuzz_$kind.log" | tail -2
    done
  fi
  if [ "${BENCH:-1}" = 1 ]; then
    timeout 420 python3 -m schedc bench "$hat" --compare cublas --time-in-ms --min-time "${MIN_TIME:-0.5}" \
      --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
    bench_lines "$OUT/bench.log"
  fi
  for f in ${PROFILE:-fp16_4096_coop_b128x256x64_s3_p4 fp16_4096_pp_b128x128x64_s4_p8}; do
    ncu_bench "$hat" "$f" "$OUT/ncu_$f.txt" --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis
    cuobjdump -sass -fun "${f}__gpu__" "${hat%.hat}.cubin" > "$OUT/sass_$f.txt" 2>&1
    echo "ncu $f ($(grep -c '^ */\*[0-9a-f]*\*/' "$OUT/sass_$f.txt") SASS instructions):"
    grep -E "Throughput|Shared|Bank|Stall|Warp Cycles|Executed Ipc|Instructions|Pipe|Duration|Frequency" "$OUT/ncu_$f.txt" \
      | head -40 | sed 's/^/  /'
  done
}

mode_edges() {
  gpu_tests 0 ${GPU_TESTS:-tests/test_hopper_edges.py tests/test_hopper.py tests/test_persistent.py tests/test_cluster.py}
  [ "${SANITIZE:-1}" = 1 ] && sanitize tests/test_hopper_edges.py
  python3 -m tests.fuzz --count "${FUZZ_COUNT:-800}" --seed "${FUZZ_SEED:-4600}" --kind hopper --jobs "${FUZZ_JOBS:-14}" \
    --gpu --coverage --shrink-seconds 120 --out "$OUT/fuzz" 2>&1 | tee "$OUT/fuzz.log" | tail -60
}

mode_fused() {
  gpu_tests 0 tests/test_fuse.py ${EXTRA_TESTS:-}
  [ "${SANITIZE:-1}" = 1 ] && sanitize tests/test_fuse.py "${SANITIZE_K:-gpu}"
  python3 -m schedc build samples/fused_gemm.py --output-dir hat_packages 2>&1 | tail -2
  python3 benchmarks/fused_gemm.py hat_packages/fused_gemm 2>&1 | tee "$OUT/fused_gemm.txt"
}

mode_attention() {
  local args=()
  gpu_tests 0 -n 8 tests/test_online.py tests/test_split_keys.py tests/test_chained.py tests/test_rows.py ${EXTRA_TESTS:-}
  [ "${BUILD:-1}" = 1 ] && rm -rf hat_packages/attention hat_packages/attention_variants
  [ -f hat_packages/attention/attention.hat ] || python3 -m schedc build samples/attention.py --output-dir hat_packages \
    2>&1 | tail -1
  cuobjdump --dump-resource-usage hat_packages/attention/attention.cubin 2>&1 | grep -E "Function|REG" \
    | tee "$OUT/resources.txt"
  [ "${VARIANTS:-1}" = 1 ] && args+=(--variants)
  [ -n "${ONLY:-}" ] && args+=(--only "$ONLY")
  [ -n "${BEFORE:-}" ] && args+=(--before "$BEFORE")
  timeout 400 python3 benchmarks/attention.py "${args[@]}" 2>&1 | tee "$OUT/attention.txt"
  [ "${B2B:-0}" = 1 ] && timeout 200 python3 benchmarks/b2b_gemm.py --only softmax 2>&1 | tee "$OUT/b2b.txt"
  if [ -n "${NCU:-}" ]; then  # Nsight Compute's headlines of those functions and of cuDNN's on the same tensors
    local ranges=() fn
    for fn in ${NCU//,/ }; do ranges+=(--nvtx-include "schedc:$fn/" --nvtx-include "cudnn:$fn/"); done
    timeout 300 ncu --nvtx "${ranges[@]}" --print-nvtx-rename kernel --csv \
      --page raw --metrics "$(python3 benchmarks/ncu_headlines.py metrics)" \
      python3 benchmarks/attention.py --variants --ncu --only "$NCU" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
    echo "ncu exit $?"; tail -3 "$OUT/ncu.err"
    python3 benchmarks/ncu_headlines.py report "$OUT/ncu.csv" | tee "$OUT/ncu.md"
  fi
  for fn in ${NCU_SOURCE//,/ }; do  # where each function's warps stall, a SASS instruction a row, and its SASS
    cuobjdump -sass -fun "${fn}__gpu__" hat_packages/attention/attention.cubin > "$OUT/$fn.sass" 2>&1 \
      || cuobjdump -sass -fun "${fn}__gpu__" hat_packages/attention_variants/attention_variants.cubin > "$OUT/$fn.sass" 2>&1
    timeout 200 ncu --nvtx --nvtx-include "schedc:$fn/" --section SourceCounters --section WarpStateStats \
      -o "$OUT/source_$fn" python3 benchmarks/attention.py --variants --ncu --only "$fn" > "$OUT/source_$fn.log" 2>&1
    ncu -i "$OUT/source_$fn.ncu-rep" --page source --csv --print-source sass > "$OUT/source_$fn.csv" 2>&1
    python3 benchmarks/ncu_source.py "$OUT/source_$fn.csv" 25 | tee "$OUT/source_$fn.md"
    echo "$fn: $(wc -l < "$OUT/$fn.sass") SASS lines, $(wc -l < "$OUT/source_$fn.csv") source rows"
  done
  # last: a slow one cannot cost the timing
  [ "${SANITIZE:-1}" = 1 ] && sanitize "tests/test_online.py tests/test_split_keys.py" "${SANITIZE_K:-gpu}"
}

mode_reduce() {
  local sample
  gpu_tests 0 tests/test_reduce.py ${EXTRA_TESTS:-}
  [ "${SANITIZE:-1}" = 1 ] && sanitize tests/test_reduce.py gpu
  for sample in gemv softmax layernorm; do
    python3 -m schedc build samples/$sample.py --output-dir hat_packages 2>&1 | tail -1
  done
  python3 benchmarks/gemv.py hat_packages/gemv 2>&1 | tee "$OUT/gemv.txt"
  python3 benchmarks/softmax.py hat_packages 2>&1 | tee "$OUT/softmax.txt"
}

mode_runtime() {
  gpu_tests 0 tests/test_runtime_sizes.py ${EXTRA_TESTS:-}
  [ "${SANITIZE:-1}" = 1 ] && sanitize tests/test_runtime_sizes.py every
  python3 -m schedc build samples/runtime_m.py --output-dir hat_packages 2>&1 | tail -1
  python3 benchmarks/runtime_m.py hat_packages/runtime_m 2>&1 | tee "$OUT/runtime_m.txt"
}

mode_torch() {
  local run
  export SCHEDC_CACHE=${SCHEDC_CACHE:-/tmp/schedc-cache}
  python3 -c "import time, torch; from schedc.package import native; t = time.time(); m = native.torch_ops()
print('torchop built and loaded:', m is not None, native.reason(), f'{time.time() - t:.1f} s')" 2>&1 | tail -30
  gpu_tests 400 tests/test_torch_ops.py tests/test_fast_call.py
  for run in $(seq "${RUNS:-2}"); do
    timeout 300 python3 benchmarks/call_overhead.py ${CALLS:+--calls $CALLS} 2>&1 | tee "$OUT/call_overhead_$run.log" \
      | grep -v "^\s*$" | tail -30
  done
}

mode_tune() {
  local shape name args
  export SCHEDC_CACHE=${SCHEDC_CACHE:-/tmp/schedc-cache}
  if [ -z "${SKIP_TESTS-}" ] && [ "${TESTS:-1}" = 1 ]; then  # the tuner's tests, the GPU one included
    python3 -m pytest -q -p no:cacheprovider tests/test_tune.py 2>&1 | tail -3
  fi
  for shape in ${SHAPES:-M=4096,N=4096,K=4096}; do
    name=${FUNCTION:-matmul_fp16}_$(echo "$shape" | tr -d 'MNK=' | tr ',' 'x')
    args=(samples/tune_matmul.py --function "${FUNCTION:-matmul_fp16}" --shapes "$shape" --budget-points "${BUDGET:-200}"
          --compare cublas --no-progress --top "${TOP:-12}" --output-dir "$OUT/pkg_$name")
    $SCHEDC tune "${args[@]}" --plot "$OUT/tune_$name.png" 2>&1 | tee "$OUT/tune_$name.txt"
    echo "== rerun from the database" | tee -a "$OUT/tune_$name.txt"
    $SCHEDC tune "${args[@]}" 2>&1 | head -2 | tee -a "$OUT/tune_$name.txt"
  done
  $SCHEDC tune --csv "$OUT/tune.csv"
}

"mode_$MODE"
