#!/usr/bin/env bash
# The fused 16-bit step with eager's rounding (issue 29, session 10), on a CUDA machine without internet (the device
# tool's H200): bench/llm_sampling.py (eager's rounding, and inductor's own), the CUDA tests of the fused step and the
# Triton kernels, and the pipeline bench of the tree before (BASE, e.g. `git archive 758905c | tar -x -C .main`) and
# this one. The tests' conftest needs soundfile (and scipy where the image lacks it): wheels in .whl are installed
# into /tmp/site first (`pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux_2_28_x86_64 -d .whl soundfile cffi pycparser scipy`).
# Usage: bash bench/cuda_eager_rounding_suite.sh OUTDIR BASE
set -u
out=${1:?output folder}; base=${2:?baseline tree}
source bench/device_env.sh
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-new timeout 200 python3 bench/llm_sampling.py --dtypes float16 --tokens 250 \
  --rounds 3 --sampler device --fuse fused --rounding eager,inductor --top-kernels 16 \
  > "$out/llm_new.json" 2> "$out/llm_new.err"
echo "llm exit $?"
COSYVOICE_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_decode_step.py \
  tests/test_device_sampling.py -k "fused_step_under or triton or silu" --tb=short -rf > "$out/unit.txt" 2>&1
echo "tests exit $?"; tail -2 "$out/unit.txt"
bench() {  # tree name
  (cd "$1" && PYTHONPATH=/tmp/site:$PWD TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$2 timeout 150 python3 -m cosyvoice_mac.bench \
    --version cosyvoice3 --devices cuda --dtypes auto --runs 3 --no-floors --json "$out/bench_$2.json" \
    > "$out/bench_$2.out" 2> "$out/bench_$2.err")
  echo "bench $2 exit $?"
}
bench "$PWD" now
bench "$base" base
