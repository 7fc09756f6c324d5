"""A batch of lines' decoding step as one CUDA graph (``models.llm.batch_decoding.FixedRowsBatch``).

Eagerly a batched step is a few hundred small kernels whatever the batch, and the host launching them was
most of a step on CUDA (bench/results/issue47_batch/h100_before_graphs/: 50-83 ms a step timed alone, against
1.03 ms for the solo step's graph).
The batch's step reads and writes fixed tensors, so after its first (eager, real) run it is captured once and
replayed for every later token, until rows leave and the batch copies itself into a smaller cache.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import torch

from cosyvoice_mac.device import try_cuda_capture

log = logging.getLogger(__name__)


class BatchStepGraph:
    """Owns the CUDA graph of one batch step function (its memory pool included): ``__call__`` runs the step,
    eagerly the first time, then by replaying what it captured. A failed capture leaves it eager (``error``)."""

    captures = 0  # graphs captured in this process (the bench and the tests read it)
    capture_seconds = 0.0

    def __init__(self, step: Callable[[], None], device: torch.device):
        self.step = step
        self.device = device  # the step's (a cuda:N): a failed capture's stream is restored there
        self.graph: torch.cuda.CUDAGraph | None = None
        self.error: str | None = None

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        self.step()  # this token's real step, and the capture's warm-up
        if self.error is None:
            captured, why = try_cuda_capture(self._capture, self.device)
            if not captured:
                self.error = f"CUDA graph capture of the batched step failed ({why}); decoding the batch eagerly"
                log.warning(self.error)

    def _capture(self) -> bool:
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the flow may issue work from another thread while this one captures
        with torch.cuda.device(self.device), torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.step()
        self.graph = graph
        BatchStepGraph.captures += 1
        BatchStepGraph.capture_seconds += time.perf_counter() - started
        return True
