#!/usr/bin/env bash
# A new voice's first audio on a CUDA machine without internet (the device tool's H200), before/after in one
# call: the CUDA tests near the change, bench/new_voice.py (today's path against this tree's, one process), and
# the pipeline bench with the flow's shared graphs off (today) and on. ``decode``: the LLM step, fused or not.
# Wheels for what the image lacks (soundfile, cffi, pycparser) in .whl.
# Usage: bash bench/cuda_new_voice_suite.sh OUTDIR [parts: tests,voice,bench | decode]
set -u
out=${1:?output folder}; parts=${2:-tests,voice,bench}
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
export COSYVOICE_PARITY_DIR=${COSYVOICE_PARITY_DIR:-$PWD/.parity}
stamp() { echo "[$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, onnxruntime as o; print('torch', torch.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
if [[ $parts == *tests* ]]; then
  COSYVOICE_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_flow_graphs.py \
    tests/test_decode_step.py tests/test_onnx_providers.py --tb=short -rf > "$out/unit_cuda.txt" 2>&1
  stamp "unit tests exit $?"; grep -E "^(FAILED|E  )" "$out/unit_cuda.txt" | head -12; tail -1 "$out/unit_cuda.txt"
fi
if [[ $parts == *voice* || $parts == *bench* ]]; then  # the faithful frontends (issue 47), built once before the timeouts
  timeout 240 python3 -m cosyvoice_mac.bench.faithful_frontends --version cosyvoice3 --seconds 3 --runs 1 > "$out/frontends.json" 2> "$out/frontends.err"
  stamp "faithful frontends exit $?"
fi
if [[ $parts == *voice* ]]; then
  timeout 150 python3 bench/new_voice.py --device cuda --dtype auto --rounds 3 > "$out/new_voice_auto.json" 2> "$out/new_voice.err"
  stamp "new voice exit $?"; grep -v -i warn "$out/new_voice.err" | tail -7
fi
if [[ $parts == *bench* ]]; then
  for shared in 0 1; do
    COSYVOICE_FLOW_SHARED_GRAPHS=$shared timeout 130 python3 -m cosyvoice_mac.bench --version cosyvoice3 --devices cuda \
      --dtypes auto --runs 3 --no-floors --json "$out/bench_shared$shared.json" > /dev/null 2> "$out/bench.err"
    stamp "bench shared=$shared exit $?"; grep -v -i warn "$out/bench.err" | tail -3
  done
fi
if [[ $parts == *decode* ]]; then
  for fuse in 0 1; do
    COSYVOICE_FUSE_DECODE=$fuse timeout 260 python3 bench/decode_step.py --device cuda --case full --dtypes float16,bfloat16 \
      --modes graphs --tokens 200 > "$out/decode_fuse$fuse.json" 2> "$out/decode.err"
    stamp "decode fuse=$fuse exit $?"; grep -v -i warn "$out/decode.err" | tail -4
  done
fi
