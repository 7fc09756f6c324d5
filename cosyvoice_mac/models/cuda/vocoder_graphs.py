"""CUDA graphs of the streamed CosyVoice3 vocoder calls, one per call shape.

A streamed chunk's vocoder call runs ~500 small kernels, so on an H200 it is bound by the host launching
them (bench/README.md: the first chunk took 16-28 ms of wall time for 2.6 ms of GPU time). Its shape is
set by the hop schedule: the k-th chunk of every sentence hands the vocoder the same number of mel frames
and the same first frame, so each shape comes back with every sentence. Nothing in the call reads the host
any more (the phase integral runs on the device and the fixed noise is one device copy at a fixed address:
:mod:`.source`), so it can be replayed as one graph.

Which calls: CUDA, the causal (CosyVoice3) vocoder with its own fixed noise, ``finalize=False``: a
sentence's last chunk and whole sentences have lengths of their own, as does CosyVoice2's per-call noise.
A shape is captured the second time it is seen (so a one-off never pays a capture, and its first run has
loaded the kernels a capture records); at most ``MAX_GRAPHS`` are held, the first ones kept (a sentence's
first chunks, which first audio waits for). They share one memory pool (one replays at a time, each keeps
its own outputs). Moving the weights drops them; a failed capture leaves the vocoder eager (``error``).
``COSYVOICE_VOCODER_GRAPHS=0`` (or ``COSYVOICE_CUDA_GRAPHS=0``) turns them off.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

import torch

from cosyvoice_mac.device import cuda_graphs_on, try_cuda_capture, weights_signature

log = logging.getLogger(__name__)

MAX_GRAPHS = 8  # a sentence's first 8 chunks; each holds its outputs (a few MB), the pool its largest call
MAX_SEEN = 64  # shapes remembered as seen once

Call = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # mel (1, 80, T) -> (wave, source)


class CallGraph:
    """Owns one captured call: the static mel ``(1, 80, T)``, the outputs (wave ``(1, N)``, source
    ``(1, 1, N_src)``) and the device tensor the noise was read from (kept alive while the graph is)."""

    def __init__(self, call: Call, mel: torch.Tensor, noise: torch.Tensor | None, pool):
        self.mel = mel.clone()
        self.noise = noise
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the LLM's thread may issue work while this one captures.
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.wave, self.source = call(self.mel)

    def replay(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The call's (wave, source) for ``mel``, fresh tensors (the next replay overwrites the outputs)."""
        self.mel.copy_(mel)
        self.graph.replay()
        return self.wave.clone(), self.source.clone()


class StreamedCallGraphs:
    """Owns one vocoder's call graphs keyed by (mel frames, first frame), the shapes seen once, the pool,
    and the weights' signature they were captured against."""

    def __init__(self, max_graphs: int = MAX_GRAPHS):
        self.max_graphs = max_graphs
        self.graphs: dict[tuple[int, int], CallGraph] = {}
        self.seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self.signature: tuple | None = None
        self.pool = None
        self.error: str | None = None
        self.captures = 0  # the bench and the tests read these
        self.replays = 0
        self.capture_seconds = 0.0

    def wanted(self, device: torch.device) -> bool:
        """CUDA, graphs wanted (both settings), and no capture of this vocoder has failed."""
        return self.error is None and cuda_graphs_on(device, "vocoder_graphs")

    def clear(self) -> None:
        """Drop every graph and what was seen (the weights moved)."""
        self.graphs.clear()
        self.seen.clear()
        self.pool = None
        self.signature = None

    def run(self, module: torch.nn.Module, call: Call, mel: torch.Tensor, first_frame: int, noise_copy) -> tuple:
        """What ``call(mel)`` gives: replayed from this shape's graph, captured now on its second sighting.
        ``noise_copy()`` is the device tensor the call's noise is read from (after the eager first run)."""
        signature = weights_signature(module)
        if signature != self.signature:
            self.clear()
            self.signature = signature
        key = (mel.shape[-1], first_frame)
        graph = self.graphs.get(key)
        if graph is None:
            if key not in self.seen or len(self.graphs) >= self.max_graphs:
                self._remember(key)
                return call(mel)
            graph = self._capture(call, mel, noise_copy(), key)
            if graph is None:
                return call(mel)
        self.replays += 1
        return graph.replay(mel)

    def report(self) -> dict:
        """What the bench prints: graphs held, captures, replays, capture time, error."""
        return {
            "graphs": len(self.graphs),
            "captures": self.captures,
            "replays": self.replays,
            "capture_s": round(self.capture_seconds, 3),
            "error": self.error,
        }

    def _remember(self, key: tuple[int, int]) -> None:
        self.seen[key] = None
        self.seen.move_to_end(key)
        while len(self.seen) > MAX_SEEN:
            self.seen.popitem(last=False)

    def _capture(self, call: Call, mel: torch.Tensor, noise: torch.Tensor | None, key) -> CallGraph | None:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        started = time.perf_counter()
        graph, why = try_cuda_capture(lambda: CallGraph(call, mel, noise, self.pool), mel.device)
        if graph is None:
            self.error = f"CUDA graph capture of the vocoder failed ({why}); running eagerly"
            log.warning(self.error)
            self.clear()
            return None
        self.graphs[key] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        return graph
