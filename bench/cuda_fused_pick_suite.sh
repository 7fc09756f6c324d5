#!/usr/bin/env bash
# The device sampler's pick ranked by one top-k and compiled with the fused step (issue 29), on a CUDA machine without
# internet (the device tool's H200): the CUDA tests near the LLM and the flow (the whole-sentence ones need wetext
# and its wheels in .whl), then bench/llm_sampling.py of the tree before (BASE, e.g. `git archive HEAD | tar -x -C
# .base`) and this tree, torch.compile modes of the fused step, and the pipeline bench of both trees (auto, fp32;
# this tree's auto twice: the second start finds torch.compile's cache on disk).
# The tiny parity folders (cosyvoice{2,3}_tiny) for the tests in .parity (COSYVOICE_PARITY_DIR); an espeak-ng that
# runs from a folder (.espeak/espeak-ng, a wrapper that sets its libraries and data) for the tests that speak.
# Usage: bash bench/cuda_fused_pick_suite.sh OUTDIR BASE [parts: tests,sentences,llm,modes,bench,bench32,restart]
set -u
out=${1:?output folder}; base=${2:?baseline tree}; parts=${3:-tests,llm,bench}
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
export COSYVOICE_PARITY_DIR=${COSYVOICE_PARITY_DIR:-$PWD/.parity}
stamp() { echo "[$(date +%T)] $*"; }
has() { [[ ",$parts," == *",$1,"* ]]; }
here=$PWD
[[ -x .espeak/espeak-ng ]] && export PATH=$here/.espeak:$PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if has tests; then
  PYTHONPATH=/tmp/site:$here COSYVOICE_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider \
    tests/test_device_sampling.py tests/test_decode_step.py tests/test_flow_length_graphs.py tests/test_flow_graphs.py \
    tests/test_flow_prefix.py tests/test_precision_auto.py --tb=short -rf > "$out/unit_cuda.txt" 2>&1
  stamp "unit tests exit $?"; grep -E "^(FAILED|E  )" "$out/unit_cuda.txt" | head -12; tail -1 "$out/unit_cuda.txt"
fi
if has sentences; then  # the CUDA tests that synthesise whole sentences
  PYTHONPATH=/tmp/site:$here COSYVOICE_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/test_flow_length_graphs.py tests/test_flow_prefix.py -k "sentences or streaming" --tb=short -rf \
    > "$out/sentences_cuda.txt" 2>&1
  stamp "sentence tests exit $?"; grep -E "^(FAILED|E  )" "$out/sentences_cuda.txt" | head -12; tail -1 "$out/sentences_cuda.txt"
fi
llm() {  # tree name [args...]
  local tree=$1 name=$2; shift 2
  (cd "$tree" && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 bench/llm_sampling.py --dtypes float16 --tokens 250 \
    --rounds 3 "$@" > "$out/llm_$name.json" 2> "$out/llm_$name.err")
  stamp "llm $name exit $?"; grep -v -i warn "$out/llm_$name.err" | tail -5
}
has llm && { llm "$base" base --fuse plain,fused; llm "$here" new --fuse plain,fused; }
if has modes; then
  llm "$here" mode_autotune --fuse fused --sampler device --compile max-autotune-no-cudagraphs/none
  llm "$here" mode_dynamic --fuse fused --sampler device --compile default/true
fi
bench() {  # tree name dtypes [env...]
  local tree=$1 name=$2 dtypes=$3; shift 3
  (cd "$tree" && env PYTHONPATH=/tmp/site:$PWD "$@" timeout 150 python3 -m cosyvoice_mac.bench --version cosyvoice3 \
    --devices cuda --dtypes "$dtypes" --runs 3 --no-floors --json "$out/bench_$name.json" > /dev/null 2> "$out/bench_$name.err")
  stamp "bench $name exit $?"; grep -v -i warn "$out/bench_$name.err" | tail -2
}
# torch.compile's cache: one per tree, so this tree's first start is a cold one and its restart finds its own
has bench && { bench "$base" base_auto auto TORCHINDUCTOR_CACHE_DIR=/tmp/ind-base; \
  bench "$here" new_auto auto TORCHINDUCTOR_CACHE_DIR=/tmp/ind-new; }
has restart && bench "$here" new_auto_restart auto TORCHINDUCTOR_CACHE_DIR=/tmp/ind-new
has bench32 && { bench "$base" base_fp32 float32 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-base; \
  bench "$here" new_fp32 float32 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-new; }
true
