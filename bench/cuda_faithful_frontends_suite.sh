#!/usr/bin/env bash
# A new voice's first audio with the faithful frontends (issue 47) on a CUDA machine without internet (the device
# tool): the frontends built there and timed per second of prompt audio (onnxruntime CPU, 1 thread), then
# bench/new_voice.py on CUDA and on two of its CPU cores (taskset) for a quiet 2-core figure.
# Wheels for what the image lacks (soundfile, cffi, pycparser) in .whl. Usage: bash bench/cuda_faithful_frontends_suite.sh OUTDIR
out=${1:?output folder}
set -u
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache COSYVOICE_ASR_DOWNLOAD=0
stamp() { echo "[$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; lscpu | grep "Model name"
python3 -c "import torch, onnxruntime as o; print('torch', torch.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
timeout 200 python3 -m cosyvoice_mac.bench.faithful_frontends --version cosyvoice3 --seconds 3,10 --runs 3 > $out/frontends_cpu1thread.json 2> $out/fe.err
stamp "frontends exit $?"; tail -2 $out/fe.err
timeout 200 python3 bench/new_voice.py --device cuda --dtype auto --rounds 3 --modes after > $out/new_voice_cuda.json 2> $out/nv_cuda.err
stamp "new voice cuda exit $?"; grep -v -i warn $out/nv_cuda.err | tail -4
OMP_NUM_THREADS=2 timeout 260 taskset -c 0,1 python3 bench/new_voice.py --device cpu --dtype auto --rounds 2 --modes after > $out/new_voice_cpu2.json 2> $out/nv_cpu.err
stamp "new voice cpu2 exit $?"; grep -v -i warn $out/nv_cpu.err | tail -4
