"""Loaded by every Python process that ``bench/suite_cpu.py`` starts (it puts this folder first on PYTHONPATH):
at exit each process appends one JSON line to ``$SUITE_CPU_FILE``: its own CPU seconds, its command line, how it
ended, and which heavy libraries it imported. Forked children end through ``os._exit`` and a killed one through
SIGTERM; both are recorded too, so the model workers an app forks are counted."""

import atexit
import json
import os
import resource
import signal
import sys
import time

_STARTED = time.time()


def _record(how: str = "exit") -> None:
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        modules = sys.modules
        line = {
            "pid": os.getpid(),
            "argv": sys.argv[:6],
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "wall_s": round(time.time() - _STARTED, 2),
            "how": how,
            "imported": [name for name in ("torch", "gradio", "mlx.core", "coremltools") if name in modules],
            "test": os.environ.get("PYTEST_CURRENT_TEST", "")[:200],
        }
        with open(os.environ["SUITE_CPU_FILE"], "a") as out:
            out.write(json.dumps(line) + "\n")
    except Exception:  # a measurement must never change what it measures
        pass


def _on_sigterm(signum, frame):
    _record("sigterm")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


if os.environ.get("SUITE_CPU_FILE"):
    atexit.register(_record)
    _real_exit = os._exit

    def _exit_recorded(code):
        _record("os._exit")
        _real_exit(code)

    os._exit = _exit_recorded
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
