#!/usr/bin/env bash
# The CPU benchmark on a lent machine's host processor (the device tool's H200 box), pinned to two cores
# as on the 2-core development machine: what auto picks and how fast it runs on that CPU's matrix units.
# Wheels for what that image lacks are in .whl (see bench/README.md).
# Usage: bash bench/host_cpu_suite.sh OUTDIR [bench args...]
set -u
out=${1:?output folder}; shift
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket" | tee "$out/cpu.txt"
grep -m1 -o -w -E "amx_bf16|amx_tile|avx512_bf16|avx512f|avx512_fp16" /proc/cpuinfo | sort -u | tr '\n' ' ' | tee -a "$out/cpu.txt"; echo
taskset -c 0,1 python3 -m cosyvoice_mac.bench --version cosyvoice3 --devices cpu --threads 2 --no-stream \
  --no-decode-profile "$@" > "$out/bench_cpu.json" 2> "$out/bench_cpu.err"
echo "bench exit $?"; tail -12 "$out/bench_cpu.err"
