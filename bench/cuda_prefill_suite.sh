#!/usr/bin/env bash
# The speech LM's prefill as CUDA graphs by padded length (issue 29, session 12), on a CUDA machine without internet
# (the device tool's H200): the CUDA tests of the prefill graphs and of everything that decodes through the runner
# (full logs, each file on its own so a slow one cannot hide the rest; the pipeline's and streaming's CUDA tests need
# espeak-ng, which the image lacks), then first audio with the prefill graphs off and on interleaved in one process,
# and with BATCH=1 the prompt encoder's batch bench on the host's CPU. Wheels and parity copy:
# bench/device_env.sh. SAMPLING=1 (default): the full-size LM's ids against eager's; BENCH=0: no first-audio toggle.
# Usage: [BASE=tree-before] bash bench/cuda_prefill_suite.sh OUTDIR
set -u
out=${1:?output folder}
source bench/device_env.sh
# (the files' CPU tests run in CI; -k picks the CUDA tests of decoding through the runner. Two CPU tests of
# test_decode_step fail on the image's torch 2.11 with or without this change: its CPU inductor rounds otherwise.)
cuda_tests="cuda_graph or fused_step_under or replayed_prefill"
run_tests() {  # tree name limit
  local started=$(date +%s)
  (cd "$1" && COSYVOICE_TEST_DEVICE=cuda PYTHONPATH=/tmp/site:$PWD timeout "$3" python3 -m pytest -v -p no:cacheprovider \
    $(ls tests/test_prefill_graphs.py 2>/dev/null) tests/test_decode_step.py tests/test_device_sampling.py -k "$cuda_tests" --tb=long \
    -rfE > "$out/unit_$2.txt" 2>&1)
  echo "tests $2 exit $? in $(( $(date +%s) - started )) s: $(tail -1 "$out/unit_$2.txt")"
}
run_tests "$PWD" now 240
if [ -n "${BASE:-}" ]; then run_tests "$BASE" base 150; fi
if [ "${SAMPLING:-1}" = 1 ]; then  # the full-size LM's ids against eager's with the prefill graphs (16-bit)
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind-sampling timeout 240 python3 bench/llm_sampling.py --device cuda \
    --dtypes float16,bfloat16 --sampler device --tokens 250 --rounds 1 > "$out/llm_sampling.json" 2> "$out/llm_sampling.err"
  echo "llm_sampling exit $?"; tail -4 "$out/llm_sampling.err"
fi
if [ "${BENCH:-1}" = 0 ]; then exit 0; fi
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-toggle timeout 210 python3 bench/first_audio_toggle.py --env COSYVOICE_PREFILL_GRAPHS \
  --rounds 6 > "$out/prefill_toggle.json" 2> "$out/prefill_toggle.err"
echo "toggle exit $?"; tail -2 "$out/prefill_toggle.err"
if [ "${BATCH:-0}" = 1 ]; then timeout 120 python3 bench/prompt_batch.py --voices 4 --rounds 3 > "$out/prompt_batch.json" 2> "$out/prompt_batch.err"
echo "prompt_batch exit $?"; fi
