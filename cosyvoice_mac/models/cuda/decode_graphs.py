"""The speech LM's decoding step as CUDA graphs replayed per token, and the sampler on the device inside them.

At batch 1 a step is a few hundred small kernels, and launching them costs more than running
them. On CUDA the step is captured once per *length bucket* (the attention reads a fixed number
of cache slots, masking those not yet written) and replayed for every token, so the CPU launches
one graph instead of hundreds of kernels. Graphs need fixed addresses: the runner keeps one
cache per model and reuses it across requests, and re-captures when the cache, the RoPE table or
the weights move. The graphs capture the step as torch.compile fused it (``DecodeOptions.fuse``, on by default).
The sampler runs on the device too (:mod:`.device_sampling`, the host sampler's ids for the same seed): each
graph is the step and its pick (compiled as one when the step is fused), and the next step is queued before
the host reads this token, so the GPU does not wait for the host between tokens (:meth:`DecodeGraphs.sampled_tokens`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from cosyvoice_mac.device import try_cuda_capture
from cosyvoice_mac.models.cuda.device_sampling import TOKEN, DeviceRas

if TYPE_CHECKING:
    from cosyvoice_mac.models.llm.kv_cache import StaticKVCache

log = logging.getLogger(__name__)


class DecodeGraphs:
    """Owns the CUDA graphs of one :class:`DecodeRunner` in graphs mode: one per length bucket (the step, and the
    step with the device sampler's pick), their memory pool, the fused steps torch.compile makes for them and the
    device sampler's state. Failures and counts go on the runner (``graph_error``, ``fuse_error``, ``captures``,
    ``capture_seconds``): it picks the mode, and reads its bucketed step, cache and token from there."""

    def __init__(self, runner):  # a DecodeRunner (not imported: it imports this module)
        self.runner = runner
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.sampled_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.logp: torch.Tensor | None = None  # the plain graphs' shared output
        self.fused = None
        self.fused_with_pick = None
        self.ras: DeviceRas | None = None

    def drop(self) -> None:
        """Forget every graph and fused step (the cache, the weights or the options they captured changed)."""
        self.graphs.clear()
        self.sampled_graphs.clear()
        self.pool = None
        self.fused = None
        self.fused_with_pick = None

    # the step alone ------------------------------------------------------------------------------
    def step(self, cache: StaticKVCache, span: int) -> torch.Tensor:
        """The bucketed step over ``span`` slots: a graph replay once captured; (V,) float32 log-probs."""
        runner = self.runner
        graph = self.graphs.get(span)
        if graph is not None:
            graph.replay()
            return self.logp
        try:
            logp = self.graph_step()(cache, span)  # this token's real step, and the capture's warm-up (and compile)
        except Exception as error:  # noqa: BLE001 (torch.compile failed here: capture the plain step)
            if self.fused is None:
                raise
            runner.fuse_error = f"torch.compile of the decoding step failed ({type(error).__name__}: {error})"
            log.warning(runner.fuse_error)
            logp = self.graph_step()(cache, span)
        captured, why = try_cuda_capture(lambda: self._capture(cache, span) or True, runner.device)
        if not captured:
            runner.graph_error = f"CUDA graph capture failed ({why}); decoding eagerly"
            log.warning(runner.graph_error)
            self.graphs.clear()
        return logp

    def graph_step(self):
        """What a graph captures: the bucketed step, or (``fuse``) torch.compile's fusion of it. Its default
        ``dynamic`` compiles the first bucket's span as a constant and the second as a symbol, so two compiles
        serve every bucket; a compile or capture that fails leaves the runner eager, as any failed capture does."""
        runner = self.runner
        if not runner.options.fuse or runner.fuse_error is not None or runner.mode != "graphs":
            return runner._bucketed_step
        if self.fused is None:
            self.fused = runner._compile(runner._bucketed_step)
        return self.fused

    def _capture(self, cache: StaticKVCache, span: int) -> None:
        """Record (not run) the step over ``span`` slots; its output lands in the shared ``logp``."""
        runner = self.runner
        if self.logp is None or self.logp.device != runner.device:
            self.logp = torch.empty(runner.lm.config.speech_vocab_size, device=runner.device)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the flow may issue work from another thread while the LLM thread captures.
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            self.logp.copy_(self.graph_step()(cache, span))
        self.graphs[span] = graph
        runner.captures += 1
        runner.capture_seconds += time.perf_counter() - started

    # the step and the sampler's pick -------------------------------------------------------------
    @staticmethod
    def serves(sampler) -> bool:
        """Whether the device sampler draws what ``sampler`` would (a plain seeded RasSampler)."""
        return DeviceRas.serves(sampler)

    def _sampler_state(self, sampler) -> DeviceRas:
        runner = self.runner
        settings = DeviceRas.settings_of(sampler)
        ras = self.ras
        if ras is None or ras.settings != settings or ras.device != runner.device:
            self.sampled_graphs.clear()  # they captured the old state's addresses
            self.fused_with_pick = None
            vocab = runner.lm.config.speech_vocab_size
            ras = self.ras = DeviceRas(settings, runner.lm.masked_before_min_len, vocab, runner.device)
        return ras

    def sampled_tokens(self, embeds: torch.Tensor, min_len: int, max_len: int, sampler, stop_ids) -> Iterator[int]:
        """Decode up to ``max_len`` ids sampled on the device (the host sampler's ids for the same seed).

        ``embeds`` (1, L, D) on the model's device and dtype; the stop id ends it and is not yielded.
        Step t+1 is queued (its input, token t, is already on the device) before the host waits for
        token t, so the GPU never idles on the host; a stop costs one step computed for nothing.
        """
        runner = self.runner
        cache, ticket = runner.start(embeds.shape[1] + max_len)
        ras = self._sampler_state(sampler)
        request = ras.begin(sampler, min_len)
        hidden = runner.lm.backbone(embeds, cache)  # the prefill, eagerly (its length varies)
        ras.pick(runner._logp_of(hidden[0, -1:]), runner._static_token())
        reading, known_offset = self._send(ras), 0
        try:
            for step in range(max_len):
                queued = None
                if step + 1 < max_len:
                    runner._check(cache, ticket)
                    ras.top_up(known_offset)
                    self._sampled_step(cache, runner._span(cache), ras)
                    cache.length += 1
                    queued = self._send(ras)
                token, known_offset = self._receive(reading)
                if token in stop_ids:
                    return
                yield token
                reading = queued
        finally:
            ras.finish(request, known_offset)  # the sampler's generator where the host sampler would have left it

    def _send(self, ras: DeviceRas):
        """Queue the copy of (token, stream offset) to the host; what :meth:`_receive` waits on."""
        state = ras.vector[TOKEN : TOKEN + 2]
        if self.runner.device.type != "cuda":
            return state.tolist(), None
        host = torch.empty(2, dtype=torch.long, pin_memory=True)
        host.copy_(state, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return host, done

    @staticmethod
    def _receive(sent) -> tuple[int, int]:
        values, done = sent
        if done is not None:
            done.synchronize()
            values = values.tolist()
        return values[0], values[1]

    def _sampled_step(self, cache: StaticKVCache, span: int, ras: DeviceRas) -> None:
        """The step over ``span`` slots and the pick of its token: a graph replay once captured."""
        runner = self.runner
        graph = self.sampled_graphs.get(span) if runner.mode == "graphs" else None
        if graph is not None:
            graph.replay()
            return
        try:
            self.sampled_graph_step()(cache, span)  # this token's real step and pick (and the warm-up, the compile)
        except Exception as error:  # noqa: BLE001 (torch.compile failed here: capture the plain step and pick)
            if self.fused_with_pick is None:
                raise
            runner.fuse_error = f"torch.compile of the sampled decoding step failed ({type(error).__name__}: {error})"
            log.warning(runner.fuse_error)
            self.sampled_graph_step()(cache, span)
        if runner.mode != "graphs":
            return

        def capture():
            started = time.perf_counter()
            graph = torch.cuda.CUDAGraph()
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                self.sampled_graph_step()(cache, span)
            self.sampled_graphs[span] = graph
            runner.captures += 1
            runner.capture_seconds += time.perf_counter() - started
            return True

        captured, why = try_cuda_capture(capture, runner.device)
        if not captured:
            runner.graph_error = f"CUDA graph capture of the sampled step failed ({why}); decoding eagerly"
            log.warning(runner.graph_error)
            self.sampled_graphs.clear()

    def _step_and_pick(self, cache: StaticKVCache, span: int) -> None:
        """The bucketed step over ``span`` slots and the device sampler's pick of its token into the static token."""
        self.ras.pick(self.runner._bucketed_step(cache, span), self.runner._token)

    def sampled_graph_step(self):
        """What a sampled step's graph captures: the step and the pick, compiled as one (``fuse``) so torch.compile
        fuses the pick's ~45 small operations too (a compile failure leaves them plain, as for the step alone)."""
        runner = self.runner
        if not runner.options.fuse or runner.fuse_error is not None or runner.mode != "graphs":
            return self._step_and_pick
        if self.fused_with_pick is None:
            self.fused_with_pick = runner._compile(self._step_and_pick)
        return self.fused_with_pick
