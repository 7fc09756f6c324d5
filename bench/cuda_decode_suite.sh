#!/usr/bin/env bash
# The lean decoding step on a CUDA machine without internet (the device tool's H200): CUDA tests,
# parity with graphs on, and before/after figures against an older tree in BASELINE (same machine, one call).
# Wheels for what the image lacks in .whl; parity vectors in $COSYVOICE_PARITY_DIR.
# Usage: bash bench/cuda_decode_suite.sh OUTDIR BASELINE [parts: tests,parity,step,pipeline,first]
set -u
out=${1:?output folder}; baseline=${2:?baseline tree}; parts=${3:-tests,parity,step,pipeline,first}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
if [[ $parts == *tests* ]]; then
  COSYVOICE_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_decode_step.py tests/test_llm.py \
    > "$out/unit_cuda.txt" 2>&1; echo "unit tests exit $?"; tail -4 "$out/unit_cuda.txt"
fi
if [[ $parts == *parity* ]]; then
  PYTHONPATH=/tmp/site:$PWD python3 bench/parity_device.py --device cuda > "$out/parity_cuda.json" 2> "$out/parity_cuda.err"
  echo "parity exit $?"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r['versions']))" "$out/parity_cuda.json"
fi
if [[ $parts == *step* ]]; then
  python3 bench/decode_step.py --baseline "$baseline" --device cuda --case full --dtypes float32,bfloat16 \
    --tokens 100 --repeats 3 > "$out/decode_step_cuda.json" 2> "$out/decode_step_cuda.err"; echo "decode_step exit $?"
  tail -8 "$out/decode_step_cuda.err"
fi
if [[ $parts == *pipeline* ]]; then
  for tree in "$baseline" "$PWD"; do
    name=$([[ $tree == "$PWD" ]] && echo this || echo baseline)
    dtypes=$([[ $name == this ]] && echo float32,bfloat16 || echo float32)  # baseline bf16: see decode_step
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree python3 -m cosyvoice_mac.bench --version cosyvoice3 --devices cuda \
      --dtypes $dtypes --runs 2 --no-floors > "$out/bench_$name.json" 2> "$out/bench_$name.err")
    echo "bench $name exit $?"; tail -3 "$out/bench_$name.err"
  done
fi
if [[ $parts == *first* ]]; then
  for dtype in float32 bfloat16; do
    PYTHONPATH=/tmp/site:$PWD python3 bench/first_audio.py --device cuda --dtype $dtype > "$out/first_$dtype.json" \
      2> "$out/first_$dtype.err"; echo "first audio $dtype exit $?"
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['median'])" "$out/first_$dtype.json"
  done
fi
