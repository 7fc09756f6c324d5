#!/usr/bin/env bash
# Issue 47 on the device tool's CUDA machine, in one call: the batched-parity tests on CUDA (each line of a ragged
# batch equal to its solo run there), then bench/batch_sweep.py at B = 1, 4, 8, 16, 32 on full-size random weights
# (CosyVoice3, then CosyVoice2): aggregate audio seconds per second, per-line RTF, first-line latency and peak GPU
# memory per B, with the LLM step alone at each B. Carried, untracked: .whl (the wheels the image lacks, as
# cuda_tests_suite.sh) and .parity (a copy of ../shared/parity).
# Usage: bash bench/cuda_batch_suite.sh OUTDIR   (then keep OUTDIR's files in bench/results/issue47_batch/)
# One call holds 600 s at most, so the work can be split: PARITY=0 skips the tests, VERSIONS picks the sweeps,
# SWEEP_S bounds each sweep (default 420) and RUNS sets its rounds (default 2).
set -u
out=${1:?output folder}
py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheels=$(ls .whl/*-py3-none-any.whl .whl/*-py2.py3-none-*.whl .whl/*-"$py"-"$py"-*.whl)
python3 -m pip install -q --no-index --no-deps --target /tmp/site $wheels || exit 1
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache COSYVOICE_PARITY_DIR=$PWD/.parity
export PYTHONPATH=/tmp/site:$PWD COSYVOICE_ASR_DOWNLOAD=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -V
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$out/machine.txt" 2>&1
started=$(date +%s)
if [ "${PARITY:-1}" = 1 ]; then
  COSYVOICE_TEST_DEVICE=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_batched_parity.py tests/test_sample_rows.py -rfEs \
    --junitxml="$out/batched_parity_cuda.xml" > "$out/batched_parity_cuda.txt" 2>&1
  echo "parity exit $? in $(( $(date +%s) - started )) s: $(tail -1 "$out/batched_parity_cuda.txt")"
fi
python3 bench/sample_rows_cost.py > "$out/sample_rows_cost_host.json" 2>&1  # the host's share of a batched step, here
for version in ${VERSIONS:-cosyvoice3 cosyvoice2}; do
  started=$(date +%s)
  timeout "${SWEEP_S:-420}" python3 bench/batch_sweep.py --device cuda --version "$version" --lines 32 --batches 1,4,8,16,32 \
    --runs "${RUNS:-2}" --note "device tool, $(head -2 "$out/machine.txt" | tail -1)" --json "$out/sweep_${version}.json" \
    > "$out/sweep_${version}.txt" 2>&1
  echo "$version sweep exit $? in $(( $(date +%s) - started )) s"; tail -4 "$out/sweep_${version}.txt"
done
