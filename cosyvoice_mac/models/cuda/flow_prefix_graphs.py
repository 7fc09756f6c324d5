"""CUDA graphs of the flow's sampler for the chunk that follows a cached prefix (the first streamed chunk).

After a voice's cached prefix, the first chunk of every streamed request has the same shape: one
attention chunk of new frames (50) whose keys run over the prefix. Its 10 Euler steps at batch 2
are ~10 000 small kernels, so run eagerly it is bound by the host launching them, not by the GPU
doing them (bench/README.md, "Streaming: time to first audio"). Captured once as one graph, a
request replays it with one launch.

A graph reads the prefix's cached tensors and the flow's weights at fixed addresses, so the
prefix owns its graphs (:class:`PrefixGraphs`, one per chunk length) and they go with it; a graph
is captured again if the weights moved. It is captured in place on the prefix's first use: the
prefix's own build has just run the same kernels eagerly, so nothing is loaded during the capture.
Only chunks of at most one attention chunk are captured (longer ones are later, one-off shapes,
and never what the first audio waits for). Where capture fails the chunk runs eagerly, and the
prefix stays eager (``error`` says why). ``COSYVOICE_CUDA_GRAPHS=0`` turns graphs off.
"""

from __future__ import annotations

import logging
import time

import torch

from cosyvoice_mac.device import cuda_graphs_on, try_cuda_capture, weights_signature

log = logging.getLogger(__name__)


class SamplerGraph:
    """Owns one captured sampler run: its static inputs (``mu``, ``mask``, ``spks``, ``cond``, the start
    noise), its output and its memory pool. Shapes as :meth:`ConditionalFlowMatching.forward`."""

    def __init__(self, decoder, noise, mu, mask, spks, cond, states):
        self.inputs = tuple(t.clone() for t in (mu, mask, spks, cond))
        self.noise = noise.clone()
        self.signature = weights_signature(decoder)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the LLM thread may issue work while this one captures.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.output = decoder.solve(self.noise, *self.inputs, True, states)

    def replay(self, mu, mask, spks, cond) -> torch.Tensor:
        """The sampler's mel ``(B, 80, T)`` for these inputs (a fresh tensor: the next replay overwrites the output)."""
        for static, value in zip(self.inputs, (mu, mask, spks, cond)):
            static.copy_(value)
        self.graph.replay()
        return self.output.clone()


class PrefixGraphs:
    """Owns the CUDA graphs of the chunks after one cached prefix, keyed by the chunk's frame count."""

    def __init__(self):
        self.graphs: dict[int, SamplerGraph] = {}
        self.error: str | None = None
        self.captures = 0  # graphs captured so far (tests and the bench read it)
        self.capture_seconds = 0.0  # host time spent capturing them

    def wanted(self, device: torch.device) -> bool:
        """Whether chunks after this prefix may run as graphs on ``device``: CUDA, graphs wanted, and no
        capture of this prefix has failed."""
        return self.error is None and cuda_graphs_on(device)

    def applies(self, decoder, mu: torch.Tensor) -> bool:
        """Whether this call (``mu (B, 80, T)`` after the prefix) runs as a graph: :meth:`wanted`, and at most
        one attention chunk of new frames."""
        return mu.shape[-1] <= decoder.estimator.config.static_chunk_size and self.wanted(mu.device)

    def sample(self, decoder, mu, mask, spks, cond, states) -> torch.Tensor:
        """What ``decoder(mu, mask, spks, cond, True, states)`` gives, replayed from this prefix's graph for
        ``mu``'s length (captured now if there is none, or if the weights moved since)."""
        frames = mu.shape[-1]
        graph = self.graphs.get(frames)
        if graph is None or graph.signature != weights_signature(decoder):
            graph = self._capture(decoder, mu, mask, spks, cond, states)
            if graph is None:
                return decoder(mu, mask, spks, cond, True, states)
        return graph.replay(mu, mask, spks, cond)

    def _capture(self, decoder, mu, mask, spks, cond, states) -> SamplerGraph | None:
        self.graphs.pop(mu.shape[-1], None)
        started = time.perf_counter()
        graph, why = try_cuda_capture(
            lambda: SamplerGraph(decoder, decoder.start_noise(mu, states), mu, mask, spks, cond, states), mu.device
        )
        if graph is None:
            self.error = f"CUDA graph capture of the flow failed ({why}); running eagerly"
            log.warning(self.error)
            self.graphs.clear()
            return None
        self.graphs[mu.shape[-1]] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        return graph
