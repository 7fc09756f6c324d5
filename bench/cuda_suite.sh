#!/usr/bin/env bash
# Correctness and speed on a CUDA machine that has torch but no internet (the device tool's H200).
# Wheels for what that image lacks are in .whl (see bench/README.md); parity vectors in $COSYVOICE_PARITY_DIR.
# Usage: bash bench/cuda_suite.sh OUTDIR [bench args...]
set -u
out=${1:?output folder}; shift
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 bench/parity_device.py --device cuda > "$out/parity_cuda.json" 2> "$out/parity_cuda.err"; echo "parity exit $?"
python3 bench/parity_device.py --device cuda --tf32 > "$out/parity_cuda_tf32.json" 2>> "$out/parity_cuda.err"
COSYVOICE_TEST_DEVICE=cuda python3 -m pytest -q -x -p no:cacheprovider tests/test_flow.py tests/test_llm.py \
  tests/test_hift.py tests/test_flow_v2.py tests/test_flow_prefix.py -k "not streaming_builds" > "$out/unit_cuda.txt" 2>&1; echo "unit tests exit $?"; tail -3 "$out/unit_cuda.txt"
for version in cosyvoice3 cosyvoice2; do
  python3 -m cosyvoice_mac.bench --version $version --devices cuda "$@" > "$out/bench_$version.json" 2> "$out/bench_$version.err"
  echo "bench $version exit $?"; tail -4 "$out/bench_$version.err"
done
python3 bench/compile_probe.py --device cuda > "$out/compile_cuda.json" 2> "$out/compile_cuda.err"; echo "compile probe exit $?"
