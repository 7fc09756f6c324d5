#!/usr/bin/env bash
# CosyVoice for Mac.
#   bash run.sh [--host H] [--port P]   set up .venv if needed, then start the web UI on 127.0.0.1:7860
#                                       (--cluster ADDRESS: its jobs run on a Ray cluster's workers, docs/cluster.md)
#   bash run.sh test [pytest args]      set up .venv if needed, then run the test suite
#   bash run.sh setup                   only set up .venv
#   bash run.sh bench [args]            set up .venv if needed, then time the full-size models (--help for options)
#   bash run.sh doctor [args]           set up .venv if needed, then check this machine: engines, speed, parity (doctor.json)
#   bash run.sh download cosyvoice3     set up .venv if needed, then fetch a model into models/ (or cosyvoice2)
# Set-up is skipped when .venv already matches pyproject.toml (a hash of it sits in .venv/.setup-stamp).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
VENV=.venv
STAMP="$VENV/.setup-stamp"
SETUP_REVISION=3  # bump when the set-up steps below change in a way that needs a re-install
TORCH_REQUIREMENT="torch==2.13.0"  # the build every result of ours was checked with
PYTHON_CANDIDATES=(python3.11 python3.12 python3.10 python3)

usage() {
  echo "usage: bash run.sh [--host HOST] [--port PORT] [--cluster ADDRESS] | bash run.sh test [PYTEST_ARGS...] | bash run.sh setup"
  echo "       bash run.sh bench [--devices cpu,cuda,mps] [--dtypes float32,float16/float32] [--tokens 250] [--runs 3]"
  echo "       bash run.sh download cosyvoice3|cosyvoice2 [--rl: cosyvoice3's llm.rl.pt too, and use it]"
  echo "       bash run.sh doctor [--tokens 100] [--engines torch/cpu,mlx/default] [--json doctor.json]"
}

say() { printf 'run.sh: %s\n' "$*" >&2; }

python_ok() {  # a Python we support: 3.10-3.12 with venv
  "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' \
    >/dev/null 2>&1
}

find_python() {
  local candidate
  for candidate in ${PYTHON:+"$PYTHON"} "${PYTHON_CANDIDATES[@]}"; do
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

MIN_MACOS_MAJOR=14  # torch 2.13 and onnxruntime 1.32 publish macOS wheels for 14.0+; MPS needs 14 too

check_platform() {
  if [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" != arm64 ]; then
    say "this is an Intel Mac (or Python under Rosetta); PyTorch ships no builds for it any more."
    say "Use an Apple Silicon Mac with an arm64 Terminal, or Linux."
    exit 1
  fi
  if [ "$(uname -s)" = Darwin ]; then
    local version major
    version=$(sw_vers -productVersion 2>/dev/null || echo unknown)
    major=${version%%.*}
    if ! [ "$major" -ge "$MIN_MACOS_MAJOR" ] 2>/dev/null; then
      say "this Mac runs macOS $version; CosyVoice for Mac needs macOS $MIN_MACOS_MAJOR (Sonoma) or newer:"
      say "PyTorch 2.13 and onnxruntime 1.32 have no builds for older versions, and the GPU (MPS) path needs 14."
      say "Update in System Settings > General > Software Update (any Apple Silicon Mac can run macOS 14), then run this again."
      exit 1
    fi
  fi
}

spec_hash() {
  local hasher=(sha256sum)
  command -v sha256sum >/dev/null 2>&1 || hasher=(shasum -a 256)
  { cat pyproject.toml; echo "$TORCH_REQUIREMENT $SETUP_REVISION"; "$VENV/bin/python" -V; } | "${hasher[@]}" | cut -d' ' -f1
}

setup() {
  check_platform
  if [ ! -x "$VENV/bin/python" ]; then
    local python
    if ! python=$(find_python); then
      say "no usable Python found: this project needs Python 3.10, 3.11 or 3.12 (with its venv module) on PATH."
      say "macOS: brew install python@3.11   Debian/Ubuntu: sudo apt-get install python3.11 python3.11-venv"
      say "or point run.sh at one: PYTHON=/path/to/python3.11 bash run.sh"
      exit 1
    fi
    say "creating $VENV with $python ($("$python" -V 2>&1))"
    "$python" -m venv "$VENV"
  fi
  if ! python_ok "$VENV/bin/python"; then
    say "$VENV does not hold a working Python 3.10-3.12. Delete it (rm -rf $VENV) and run this again."
    exit 1
  fi
  local wanted
  wanted=$(spec_hash)
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
    return 0
  fi
  say "installing dependencies into $VENV (the first time takes several minutes)"
  local pip=("$VENV/bin/python" -m pip install --disable-pip-version-check)
  # torch first, pinned, so nothing that depends on it can pull in another build. On Linux x86_64
  # pip's find-links can serve the CPU build; on macOS arm64 the PyPI wheel includes MPS.
  "${pip[@]}" "$TORCH_REQUIREMENT"
  "${pip[@]}" -e ".[test,preview,coreml,lint,cluster]" "$TORCH_REQUIREMENT"  # cluster: Ray, for --cluster (and its tests)
  "${pip[@]}" --no-deps "resemblyzer==0.1.4"  # test-only; see pyproject.toml
  echo "$wanted" >"$STAMP"
  say "set-up done"
}

ensure_test_tools() {  # speech samples (espeak-ng, flite) and the browser the UI tests drive (chromium)
  local missing=()
  command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
  command -v flite >/dev/null 2>&1 || missing+=(flite)
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1 || missing+=(chromium)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(uname -s)" = Linux ] && command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    say "installing ${missing[*]} (the tests make speech samples and drive a browser with them)"
    if $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}" >/dev/null; then
      return 0
    fi
  elif [ "$(uname -s)" = Darwin ] && command -v brew >/dev/null 2>&1; then
    local formula
    for formula in "${missing[@]}"; do
      [ "$formula" = chromium ] && continue  # the browser tests use an installed Chrome on macOS
      brew install "$formula" || true
    done
    return 0
  fi
  say "${missing[*]} missing and could not be installed; tests that need them will fail."
  say "Install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}; macOS: brew install espeak-ng flite)."
}

verb="${1:-}"
case "$verb" in
  "" | -*)
    setup
    exec "$VENV/bin/python" app.py "$@"
    ;;
  test)
    shift
    setup
    ensure_test_tools
    export OMP_WAIT_POLICY=PASSIVE
    export COSYVOICE_ASR_DOWNLOAD="${COSYVOICE_ASR_DOWNLOAD:-0}"  # tests never reach for the hub
    parallel=()
    if [ $# -eq 0 ]; then  # the whole suite: the tree must pass the linter and the formatter first
      say "ruff: lint and format check"
      "$VENV/bin/ruff" check . && "$VENV/bin/ruff" format --check --quiet . || {
        say "ruff found problems (above); fix them, or run: $VENV/bin/ruff check --fix . && $VENV/bin/ruff format ."
        exit 1
      }
      # a worker per core, at most 4 (each starts its own app servers; a third worker on two cores was measured
      # no faster: bench/results/issue44_suite/session3_run2_3workers.json). A test file, or a folder sharing one
      # app server (api, browser, reliability), stays on one worker: tests/conftest.py groups them
      parallel=(-n auto --maxprocesses 4 --dist loadgroup)
    fi
    exec "$VENV/bin/python" -m pytest -v ${parallel[@]+"${parallel[@]}"} "$@"
    ;;
  setup)
    setup
    ;;
  bench)
    shift
    setup
    export OMP_WAIT_POLICY=PASSIVE
    exec "$VENV/bin/python" -m cosyvoice_mac.bench "$@"
    ;;
  doctor)
    shift
    setup
    export OMP_WAIT_POLICY=PASSIVE
    exec "$VENV/bin/python" -m cosyvoice_mac.bench.doctor "$@"
    ;;
  download)
    shift
    setup
    exec "$VENV/bin/python" -m cosyvoice_mac.download "$@"
    ;;
  help)
    usage
    ;;
  *)
    usage >&2
    say "unknown command '$verb'"
    exit 2
    ;;
esac
