#!/usr/bin/env bash
# Issue 44 moved the CUDA-only tuning into cosyvoice_mac/models/cuda/: on a CUDA machine without internet (the device
# tool's H100/H200), the CUDA tests of every moved piece on this tree and on the tree before (.base: an untracked
# `git archive ea3218f`, carried), then the pipeline bench of both trees in the same call, so "behaviour and
# speed unchanged" is measured, not assumed. Wheels the image lacks: .whl (soundfile, cffi per Python, pycparser);
# the tiny parity models: .parity (a copy of ../shared/parity). BENCH=0: the tests only.
# Usage: [BENCH=0] bash bench/cuda_layout_suite.sh OUTDIR
set -u
out=${1:?output folder}
py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/soundfile* .whl/pycparser* .whl/cffi*-"$py"-* || exit 1
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache COSYVOICE_PARITY_DIR=$PWD/.parity
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt"; python3 -V >> "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" >> "$out/gpu.txt"
tests="tests/test_decode_step.py tests/test_device_sampling.py tests/test_flow_graphs.py tests/test_flow_length_graphs.py
  tests/test_vocoder_graphs.py tests/test_hift.py tests/test_llm.py tests/test_flow.py tests/test_flow_prefix.py"
run_tests() {  # tree name
  local started=$(date +%s)
  (cd "$1" && COSYVOICE_TEST_DEVICE=cuda PYTHONPATH=/tmp/site:$PWD timeout 300 python3 -m pytest -q -p no:cacheprovider \
    $tests -rfEs > "$out/unit_$2.txt" 2>&1)
  echo "tests $2 exit $? in $(( $(date +%s) - started )) s: $(tail -1 "$out/unit_$2.txt")"
}
run_tests "$PWD" now
run_tests "$PWD/.base" base
if [ "${BENCH:-1}" = 0 ]; then exit 0; fi
for round in 1; do  # both trees in one call, one after the other
  for tree in now base; do
    dir=$PWD; [ "$tree" = base ] && dir=$PWD/.base
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$tree timeout 240 python3 -m cosyvoice_mac.bench \
      --version cosyvoice3 --devices cuda --dtypes auto --runs 3 > "$out/bench_${tree}_$round.json" 2> "$out/bench_${tree}_$round.err")
    echo "bench $tree round $round exit $?"; tail -2 "$out/bench_${tree}_$round.err"
  done
done
