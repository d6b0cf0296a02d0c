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
