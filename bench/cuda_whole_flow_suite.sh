#!/usr/bin/env bash
# The whole non-streaming flow as length-bucket CUDA graphs, and the probe that times the flow as it now runs
# (issue 29), on a CUDA machine without internet (the device tool's H200): the CUDA tests near the change,
# bench/flow_length_graphs.py (eager against the bucket's graph, fp32 and bf16), then the pipeline bench of
# the tree before (BASE, e.g. `git archive HEAD~1 | tar -x -C .base`) and this tree in one call.
# Wheels for what the image lacks (soundfile, cffi, pycparser) in .whl.
# The tiny parity folders (cosyvoice{2,3}_tiny) for the tests in .parity (COSYVOICE_PARITY_DIR).
# Usage: bash bench/cuda_whole_flow_suite.sh OUTDIR BASE [parts: tests,flow,bench,nofuse,bench32]
set -u
out=${1:?output folder}; base=${2:?baseline tree}; parts=${3:-tests,flow,bench}
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
export COSYVOICE_PARITY_DIR=${COSYVOICE_PARITY_DIR:-$PWD/.parity}
stamp() { echo "[$(date +%T)] $*"; }
has() { [[ ",$parts," == *",$1,"* ]]; }
here=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if has tests; then
  PYTHONPATH=/tmp/site:$here COSYVOICE_TEST_DEVICE=cuda timeout 210 python3 -m pytest -q -p no:cacheprovider \
    tests/test_flow_length_graphs.py tests/test_flow_graphs.py tests/test_precision_auto.py tests/test_decode_step.py \
    tests/test_device_sampling.py --tb=short -rf \
    > "$out/unit_cuda.txt" 2>&1
  stamp "unit tests exit $?"; grep -E "^(FAILED|E  )" "$out/unit_cuda.txt" | head -12; tail -1 "$out/unit_cuda.txt"
fi
if has flow; then
  PYTHONPATH=/tmp/site:$here timeout 200 python3 bench/flow_length_graphs.py --calls 7 > "$out/flow_length_graphs.json" \
    2> "$out/flow.err"; stamp "flow exit $?"; grep -v -i warn "$out/flow.err" | tail -5
fi
bench() {  # tree name dtypes [env...]
  local tree=$1 name=$2 dtypes=$3; shift 3
  (cd "$tree" && env PYTHONPATH=/tmp/site:$PWD "$@" timeout 150 python3 -m cosyvoice_mac.bench --version cosyvoice3 \
    --devices cuda --dtypes "$dtypes" --runs 3 --no-floors --json "$out/bench_$name.json" > /dev/null 2> "$out/bench_$name.err")
  stamp "bench $name exit $?"; grep -v -i warn "$out/bench_$name.err" | tail -2
}
has bench && { bench "$base" base_auto auto; bench "$here" new_auto auto; }
has bench32 && { bench "$base" base_fp32 float32; bench "$here" new_fp32 float32; }
has nofuse && bench "$here" new_auto_nofuse auto COSYVOICE_FUSE_DECODE=0
true
