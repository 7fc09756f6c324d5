#!/usr/bin/env bash
# Every CUDA-only test item on this tree, in one call on the device tool's CUDA machine (no internet, its own torch):
# the test files that hold a "needs CUDA" / "CUDA or MPS" item, run whole with COSYVOICE_TEST_DEVICE=cuda, plus the
# doctor on CUDA. Carried, untracked: .whl (wheels the image lacks: soundfile, cffi, pycparser, wetext and its
# dependencies, per Python version) and .parity (a copy of ../shared/parity: the tiny models and golden vectors).
# Usage: bash bench/cuda_tests_suite.sh OUTDIR   (then keep OUTDIR's files in bench/results/)
set -u
out=${1:?output folder}
py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheels=$(ls .whl/*-py3-none-any.whl .whl/*-py2.py3-none-*.whl .whl/*-"$py"-"$py"-*.whl)  # the image has numpy, cffi's own
python3 -m pip install -q --no-index --no-deps --target /tmp/site $wheels || exit 1
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache COSYVOICE_PARITY_DIR=$PWD/.parity
export PYTHONPATH=/tmp/site:$PWD COSYVOICE_TEST_DEVICE=cuda COSYVOICE_ASR_DOWNLOAD=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -V
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$out/machine.txt" 2>&1
files=$(grep -lE "needs CUDA|CUDA or MPS|MPS or CUDA" tests/test_*.py | tr '\n' ' ')
echo "$files" > "$out/files.txt"
started=$(date +%s)
timeout 420 python3 -m pytest -q -p no:cacheprovider $files tests/test_llm.py tests/test_flow_prefix.py -rfEs \
  --junitxml="$out/cuda_tests.xml" > "$out/cuda_tests.txt" 2>&1
echo "tests exit $? in $(( $(date +%s) - started )) s: $(tail -1 "$out/cuda_tests.txt")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$out/cuda_tests.txt" | head -40
timeout 150 python3 -m cosyvoice_mac.bench.doctor --engines torch/cuda --tokens 50 --json "$out/doctor.json" \
  > "$out/doctor.txt" 2>&1
echo "doctor exit $?"; tail -15 "$out/doctor.txt"
