#!/usr/bin/env bash
# The LLM's sampler on the device (issue 29) on a CUDA machine without internet (the device tool's H200), before
# and after in one call: the CUDA tests near the change, bench/llm_sampling.py (host sampler against device
# sampler, one process per dtype set), and the pipeline bench with COSYVOICE_DEVICE_SAMPLING=0 (before) and 1.
# ``fused``: the same with torch.compile's fused step under the graphs; ``benchfuse``: the pipeline bench with it.
# Usage: bash bench/cuda_sampling_suite.sh OUTDIR [parts: tests,llm,fused,bench,bench32,benchfuse]
set -u
out=${1:?output folder}; parts=${2:-tests,llm,fused,bench}
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
stamp() { echo "[$(date +%T)] $*"; }
has() { [[ ",$parts," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
if has tests; then
  COSYVOICE_TEST_DEVICE=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_device_sampling.py \
    tests/test_decode_step.py --tb=short -rf > "$out/unit_cuda.txt" 2>&1
  stamp "unit tests exit $?"; grep -E "^(FAILED|E  )" "$out/unit_cuda.txt" | head -12; tail -1 "$out/unit_cuda.txt"
fi
if has llm; then
  timeout 200 python3 bench/llm_sampling.py --device cuda --dtypes float16,bfloat16,float32 --tokens 250 --rounds 3 \
    > "$out/llm_sampling.json" 2> "$out/llm_sampling.err"; stamp "llm sampling exit $?"; grep -v -i warn "$out/llm_sampling.err" | tail -7
fi
if has fused; then
  timeout 170 python3 bench/llm_sampling.py --device cuda --dtypes float16 --tokens 250 --rounds 3 --fuse plain,fused \
    > "$out/llm_sampling_fused.json" 2> "$out/llm_sampling_fused.err"; stamp "llm sampling fused exit $?"
  grep -v -i warn "$out/llm_sampling_fused.err" | tail -5
fi
for dtypes in auto float32; do
  has "$([[ $dtypes == auto ]] && echo bench || echo bench32)" || continue
  for on in 0 1; do
    COSYVOICE_DEVICE_SAMPLING=$on timeout 130 python3 -m cosyvoice_mac.bench --version cosyvoice3 --devices cuda \
      --dtypes $dtypes --runs 3 --no-floors --json "$out/bench_${dtypes}_ds$on.json" > /dev/null 2> "$out/bench.err"
    stamp "bench $dtypes device_sampling=$on exit $?"; grep -v -i warn "$out/bench.err" | tail -3
  done
done
if has benchfuse; then
  COSYVOICE_DEVICE_SAMPLING=1 COSYVOICE_FUSE_DECODE=1 timeout 180 python3 -m cosyvoice_mac.bench --version cosyvoice3 \
    --devices cuda --dtypes auto --runs 3 --no-floors --json "$out/bench_auto_ds1_fused.json" > /dev/null 2> "$out/bench.err"
  stamp "bench auto device_sampling=1 fused exit $?"; grep -v -i warn "$out/bench.err" | tail -3
fi
