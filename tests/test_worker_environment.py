"""The worker's process environment: set before torch loads, the user's own values kept, and the bench
measuring in the same environment as the worker it stands for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cosyvoice_mac.engine.worker import WORKER_ENVIRONMENT

REPO = Path(__file__).resolve().parents[1]
THREAD_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def _environment_after_import(module: str, **own: str) -> dict:
    """The thread settings a fresh interpreter has after importing ``module``, and whether torch was
    already loaded when ``cosyvoice_mac.engine.worker`` (the table's home) finished importing."""
    env = {key: value for key, value in os.environ.items() if key not in THREAD_SETTINGS}
    env.update(own, PYTHONPATH=str(REPO))
    script = (
        "import json, os, sys\n"
        "import cosyvoice_mac.engine.worker\n"
        "torch_first = 'torch' in sys.modules\n"
        f"import {module}\n"
        f"print(json.dumps({{'torch_first': torch_first, **{{k: os.environ.get(k) for k in {THREAD_SETTINGS!r}}}}}))\n"
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
