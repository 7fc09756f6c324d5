"""How the model's worker process starts: a fork server on Linux, a fresh interpreter on macOS.

A fresh interpreter ("spawn") imports torch and the pipeline at every start and restart: 3-10 s of CPU on a
2-core machine before the model even loads. On Linux a fork server that imported them once forks each worker
in about a tenth of a second (Python 3.14 makes the fork server Linux's default for this reason). macOS keeps
spawn: forking after Apple's frameworks have started is unsafe, and the Metal device must be made in the
process that uses it.

The server's modules were imported under the environment it started with (OpenMP, for one, reads its
settings only then), so a worker forks from it only while this process's environment is still that one;
after any change a worker starts fresh, as spawn always did.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys
import threading

METHODS = ("auto", "spawn", "forkserver")
# What every worker imports first; the fork server imports it once (runtime imports torch and the pipeline).
PRELOAD = ["cosyvoice_mac.engine.runtime"]
# pytest rewrites this for every test; nothing the server imports reads it.
PER_TEST_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})

# What ps, top and psutil call a worker on Linux (a forked worker's command line is its server's, so the name is
# how a person or a test tells them apart); the kernel keeps 15 characters.
WORKER_NAME = "cosyvoice-worker"[:15]
_PR_SET_NAME = 15  # <linux/prctl.h>

_lock = threading.Lock()
_server_environment: dict[str, str] | None = None  # the environment the fork server was started with


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in PER_TEST_VARIABLES}


def fork_server_usable() -> bool:
    """True where a worker may fork from the server: Linux, with this process's environment unchanged since
    the server started (or no server yet)."""
    if not sys.platform.startswith("linux"):
        return False
    with _lock:
        return _server_environment is None or _server_environment == _environment()


def worker_context(method: str = "auto"):
    """The multiprocessing context a worker process starts in. ``auto``: the fork server where
    :func:`fork_server_usable`, else spawn; ``spawn`` or ``forkserver`` force one. Call it just before the
    process starts, after this process's environment holds what the worker must start with."""
    global _server_environment
    if method not in METHODS:
        raise ValueError(f"unknown start method {method!r}: choose one of {', '.join(METHODS)}")
    if method == "auto":
        method = "forkserver" if fork_server_usable() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        with _lock:
            if _server_environment is None:  # the server starts with the first worker started through it
                context.set_forkserver_preload(PRELOAD)
                _server_environment = _environment()
    return context


def name_this_process(name: str = WORKER_NAME) -> bool:
    """Linux: give the calling process ``name`` (as ps and top show it); True when set. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0) == 0
    except (OSError, AttributeError):  # a C library without prctl: the name is only a convenience
        return False


def looks_like_worker(name: str, command_line: str) -> bool:
    """Whether a child process (its name and its command line joined) is a model worker: named by
    :func:`name_this_process`, or a spawned interpreter other than multiprocessing's resource tracker."""
    spawned = "spawn_main" in command_line and "resource_tracker" not in command_line
    return name == WORKER_NAME or spawned
