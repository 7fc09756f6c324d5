#!/usr/bin/env bash
# First streamed audio and the precision probe on a CUDA machine without internet (the device tool's H200):
# CUDA tests, parity with the flow's graphs on, where the first chunk's time goes (graphs off/on), whether
# flow/vocoder graphs pay, the probe at full depth, and the pipeline bench of this tree and of BASELINE.
# Wheels for what the image lacks in .whl; parity vectors in $COSYVOICE_PARITY_DIR.
# Usage: bash bench/cuda_graphs_suite.sh OUTDIR BASELINE [parts: first,graphs,kernels,probe,parity,tests,bench]
set -u
out=${1:?output folder}; baseline=${2:?baseline tree}; parts=${3:-first,graphs,kernels,probe,parity,tests,bench}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
stamp() { echo "[$(date +%T)] $*"; }
if [[ $parts == *first* ]]; then
  for dtype in float32 bfloat16; do
    timeout 240 python3 bench/first_audio.py --device cuda --dtype $dtype > "$out/first_$dtype.json" 2> "$out/first_$dtype.err"
    stamp "first audio $dtype exit $?"; tail -2 "$out/first_$dtype.err"
    python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['median']))" "$out/first_$dtype.json"
  done
fi
if [[ $parts == *graphs* ]]; then
  timeout 240 python3 bench/flow_graphs.py --device cuda > "$out/flow_graphs.json" 2> "$out/flow_graphs.err"
  stamp "flow graphs exit $?"; tail -3 "$out/flow_graphs.err"
fi
if [[ $parts == *kernels* ]]; then
  timeout 120 python3 bench/flow_kernels.py --device cuda > "$out/flow_kernels.json" 2> "$out/flow_kernels.err"
  stamp "flow kernels exit $?"; grep -v -i warn "$out/flow_kernels.err" | tail -5
fi
if [[ $parts == *probe* ]]; then
  timeout 120 python3 bench/precision_probe.py --device cuda > "$out/probe.json" 2> "$out/probe.err"
  stamp "probe exit $?"; tail -6 "$out/probe.err"
fi
if [[ $parts == *parity* ]]; then
  timeout 240 python3 bench/parity_device.py --device cuda > "$out/parity_cuda.json" 2> "$out/parity_cuda.err"
  stamp "parity exit $?"; python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['versions']))" "$out/parity_cuda.json"
fi
if [[ $parts == *tests* ]]; then
  COSYVOICE_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_flow_graphs.py \
    tests/test_flow_prefix.py tests/test_decode_step.py --tb=short -rf > "$out/unit_cuda.txt" 2>&1
  stamp "unit tests exit $?"; grep -E "^(FAILED|E  )" "$out/unit_cuda.txt" | head -12; tail -1 "$out/unit_cuda.txt"
fi
if [[ $parts == *bench* ]]; then
  for tree in "$PWD" "$baseline"; do
    name=$([[ $tree == "$PWD" ]] && echo this || echo baseline)
    dtypes=$([[ $name == this ]] && echo default || echo float32,bfloat16)
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree timeout 300 python3 -m cosyvoice_mac.bench --version cosyvoice3 \
      --devices cuda --dtypes $dtypes --runs 2 --no-floors > "$out/bench_$name.json" 2> "$out/bench_$name.err")
    stamp "bench $name exit $?"; grep -v -i warn "$out/bench_$name.err" | tail -10
  done
fi
