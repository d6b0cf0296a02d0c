# Sourced by the device scripts (benchmarks/device_*.sh): $OUT made, the carried wheels installed
# once per machine into /tmp/site and put on PYTHONPATH, unbuffered Python, the GPU's name and
# driver written to $OUT/gpu.txt.
OUT=${OUT:-device_out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  [ -d /tmp/site/islpy ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# sanitize TESTS [K]: memcheck, racecheck (and synccheck where $TOOLS says) of the gpu-marked tests in
# TESTS (selected by -k K), each tool's summary printed, its log in $OUT/sanitizer_<tool>.log.
sanitize() {
  for tool in ${TOOLS-memcheck racecheck synccheck}; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m pytest -q -p no:cacheprovider -m gpu $1 -k "${2:-gpu}" 2>&1 \
      | tee "$OUT/sanitizer_$tool.log" | grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" | tail -3
  done
}
