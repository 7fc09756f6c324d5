"""The worker's process environment: set before torch loads, the user's own values kept, and the bench
measuring in the same environment as the worker it stands for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_mac.engine.worker import (
    COMPILE_CACHE_VARIABLE,
    WORKER_ENVIRONMENT,
    WorkerConfig,
    WorkerProcess,
    unset_worker_environment,
)
from cosyvoice_mac.preview import PIPELINE_FACTORY

REPO = Path(__file__).resolve().parents[1]
THREAD_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def _environment_after_import(module: str, **own: str) -> dict:
    """The thread settings a fresh interpreter has after importing ``module`` (and, as ``at_torch``, when
    torch began to load), and whether torch was already loaded when ``cosyvoice_mac.engine.worker`` (the
    table's home) finished importing."""
    env = {key: value for key, value in os.environ.items() if key not in THREAD_SETTINGS}
    env.update(own, PYTHONPATH=str(REPO))
    script = (
        "import json, os, sys\n"
        f"settings, at_torch = {THREAD_SETTINGS!r}, {{}}\n"
        "class Watch:\n"  # a finder that finds nothing: it only looks at the environment when torch is asked for
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' and not at_torch:\n"
        "            at_torch.update((k, os.environ.get(k)) for k in settings)\n"
        "sys.meta_path.insert(0, Watch())\n"
        "import cosyvoice_mac.engine.worker\n"
        "torch_first = 'torch' in sys.modules\n"
        f"import {module}\n"
        "print(json.dumps({'torch_first': torch_first, 'at_torch': at_torch, "
        "**{k: os.environ.get(k) for k in settings}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_bench_runs_in_the_worker_environment_and_keeps_a_users_own_values():
    applied = _environment_after_import("cosyvoice_mac.bench")
    assert applied["torch_first"] is False  # the table is readable before torch loads OpenMP
    assert {key: applied[key] for key in THREAD_SETTINGS} == {key: WORKER_ENVIRONMENT[key] for key in THREAD_SETTINGS}
    own = _environment_after_import("cosyvoice_mac.bench", GOMP_SPINCOUNT="0")
    assert own["GOMP_SPINCOUNT"] == "0" and own["KMP_BLOCKTIME"] == WORKER_ENVIRONMENT["KMP_BLOCKTIME"]


@pytest.mark.parametrize("module", ["cli", "measure", "opcount"])
def test_torch_loads_in_the_worker_environment_whichever_bench_module_is_imported(module):
    """OpenMP reads its settings once, as torch loads: every way into the bench sets them before that."""
    seen = _environment_after_import(f"cosyvoice_mac.bench.{module}")["at_torch"]
    assert seen == {key: WORKER_ENVIRONMENT[key] for key in THREAD_SETTINGS}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the child's environment from /proc")
def test_the_worker_process_starts_with_a_short_spin_before_its_threads_sleep(monkeypatch):
    for name in THREAD_SETTINGS:
        monkeypatch.delenv(name, raising=False)  # a user who set none of them
    worker = WorkerProcess(WorkerConfig(model_dir=None, pipeline_factory=PIPELINE_FACTORY, outputs_dir=None))
    try:
        assert worker.receive(timeout=60), "the worker said nothing"  # it runs: its environment is the exec'd one
        entries = Path(f"/proc/{worker.process.pid}/environ").read_bytes().split(b"\0")
    finally:
        worker.stop(timeout=10)
    child = dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)
    assert child["OMP_WAIT_POLICY"] == "PASSIVE"
    assert 0 < int(child["GOMP_SPINCOUNT"]) <= 100_000  # spins (~0.75 ms at 10 000), then sleeps
    assert 0 < int(child["KMP_BLOCKTIME"]) <= 5  # LLVM OpenMP's counterpart, in milliseconds


def test_torch_compiles_are_kept_in_the_user_cache_folder_unless_the_user_says_otherwise(tmp_path, monkeypatch):
    """The fused LLM step compiles for ~30 s on its first load on CUDA; kept in a temporary folder (torch's default)
    a reboot would make every user pay it again."""
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(COMPILE_CACHE_VARIABLE, raising=False)
    assert unset_worker_environment()[COMPILE_CACHE_VARIABLE] == str(tmp_path / "torch-compile")
    monkeypatch.setenv(COMPILE_CACHE_VARIABLE, "/elsewhere")
    assert COMPILE_CACHE_VARIABLE not in unset_worker_environment()
