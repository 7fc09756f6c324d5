#!/usr/bin/env bash
# The streamed vocoder calls as CUDA graphs and the phase integral on the device (issue 29, session 11), on a CUDA
# machine without internet (the device tool's H200): the CUDA tests of the vocoder graphs, the vocoder and streaming,
# then the pipeline bench of the tree before (BASE, e.g. `git archive bfe8d6b | tar -x -C .base`) and this one,
# and this one with the vocoder graphs off (COSYVOICE_VOCODER_GRAPHS=0) when EXTRA=1. Wheels and parity copy:
# bench/device_env.sh. BENCH=0: tests only.
# Usage: bash bench/cuda_vocoder_graphs_suite.sh OUTDIR BASE
set -u
out=${1:?output folder}; base=${2:?baseline tree}
source bench/device_env.sh
if [ "${TESTS:-1}" = 1 ]; then
  # (tests/test_streaming.py makes its prompts with espeak-ng, which the device image lacks)
  COSYVOICE_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_vocoder_graphs.py \
    tests/test_hift.py --tb=short -rf > "$out/unit.txt" 2>&1
  echo "tests exit $?"; tail -3 "$out/unit.txt"
fi
if [ "${BENCH:-1}" = 0 ]; then exit 0; fi
bench() {  # tree name [env assignments]
  local tree=$1 name=$2; shift 2
  (cd "$tree" && env "$@" PYTHONPATH=/tmp/site:$PWD TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout 160 python3 \
    -m cosyvoice_mac.bench --version cosyvoice3 --devices cuda --dtypes auto --runs 3 --no-floors \
    --json "$out/bench_$name.json" > "$out/bench_$name.out" 2> "$out/bench_$name.err")
  echo "bench $name exit $?"
}
bench "$PWD" now
bench "$base" base
if [ "${EXTRA:-0}" = 1 ]; then bench "$PWD" now_nographs COSYVOICE_VOCODER_GRAPHS=0; fi
