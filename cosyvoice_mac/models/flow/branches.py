"""On a CPU, run the two classifier-free-guidance branches side by side instead of as one batch of two.

Why: the flow's estimator is many small operations. With ``OMP_WAIT_POLICY=PASSIVE`` (our tests
and benchmarks; also the polite setting on a shared machine) every parallel operation wakes a
sleeping OpenMP thread, which costs more than the second core gives back at these sizes. Measured
on the 2-core test machine, one CosyVoice2 U-Net call at 50 frames: 0.249 s as a batch of two on 2
threads, 0.247 s on 1 thread, 0.158 s as two batch-1 branches on two threads of one OpenMP thread
each. The branches share nothing but their inputs, and each reads its own half of a cached prefix
(``StepState.branch``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

from cosyvoice_mac.device import single_threaded_pool

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it must start its own pool, not wait on that one."""
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _branch_pool() -> ThreadPoolExecutor:
    """Two worker threads of one intra-op thread each, started once per process."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = single_threaded_pool(2, "cfg-branch")
        return _pool


def use_branch_threads(x: torch.Tensor) -> bool:
    """True where side-by-side branches pay: a CPU tensor and at least two torch threads."""
    return x.device.type == "cpu" and torch.get_num_threads() >= 2


Branch = Callable[[], torch.Tensor]


def run_branches(first: Branch, second: Branch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run both callables at once on the branch threads (in inference mode) and return their results."""

    def in_inference_mode(function):
        def run():
            with torch.inference_mode():
                return function()

        return run

    pool = _branch_pool()
    futures = [pool.submit(in_inference_mode(function)) for function in (first, second)]
    return futures[0].result(), futures[1].result()
