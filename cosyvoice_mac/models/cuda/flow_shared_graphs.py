"""CUDA graphs of a new voice's streaming flow work, shared by every voice: its prefix build and its first chunk.

``flow_prefix_graphs.py`` keeps a voice's first-chunk graph with that voice's prefix (it reads the prefix's tensors),
so every new voice builds its prefix eagerly (10 Euler steps of ~1 000 launches each over the prompt's
frames) and then captures its own first chunk: host-bound work that made a new voice's first audio
3-4x a known one's on an H200. Here both are graphs keyed by the prefix's LENGTH alone (a bucket: the
streaming plan caches 25, 50 or 75 prompt tokens), captured once per length and process and replayed
for every voice after:

* the build graph runs the recording sampler over the prefix's frames; its step tensors (attention keys
  and values, causal-conv tails) are static ``slots``. Building a voice's prefix replays it and clones
  the slots into the voice's own :class:`FlowPrefix` (one device copy: it stays valid when another voice
  is built next);
* a chunk graph (one per chunk length, the first streamed chunk's) reads the slots. A prefix that is not
  the one in the slots is copied in first (one device copy, far under a millisecond on an H200).

Bounded: at most ``MAX_LENGTHS`` lengths are held (the least recently used goes), and moving or casting
the flow drops them all (:meth:`Flow._apply`). A failed capture leaves that flow on the eager path (and the
per-prefix graphs) for good, ``error`` says why. ``COSYVOICE_FLOW_SHARED_GRAPHS=0`` turns this off
(``COSYVOICE_CUDA_GRAPHS=0`` turns every graph off).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict

import torch

from cosyvoice_mac.device import cuda_graphs_on, try_cuda_capture, weights_signature
from cosyvoice_mac.models.cuda.flow_prefix_graphs import SamplerGraph
from cosyvoice_mac.models.flow.prefix import FlowPrefix, StepState

log = logging.getLogger(__name__)

MAX_LENGTHS = 2  # prefix lengths held at once (a length's slots and pools: ~1 GB in fp32 for 2 s of prompt)
_serials = itertools.count(1)


class BuildGraph:
    """Owns one captured prefix build: static inputs (start noise, ``mu``, ``mask``, ``spks``, ``cond``; shapes
    as :meth:`ConditionalFlowMatching.forward`) and the recorded step states it writes (the slots)."""

    def __init__(self, decoder, mu, mask, spks, cond):
        self.inputs = tuple(t.clone() for t in (mu, mask, spks, cond))
        self.noise = decoder.start_noise(mu).clone()
        self.slots = [StepState() for _ in range(decoder.config.n_timesteps)]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            decoder.solve(self.noise, *self.inputs, True, self.slots)

    def replay(self, mu, mask, spks, cond) -> None:
        for static, value in zip(self.inputs, (mu, mask, spks, cond)):
            static.copy_(value)
        self.graph.replay()


class LengthGraphs:
    """Owns the graphs of one prefix length: its build, its chunks (by chunk frames) and which prefix the slots hold."""

    def __init__(self, build: BuildGraph, signature: tuple):
        self.build = build
        self.signature = signature
        self.chunks: dict[int, SamplerGraph] = {}
        self.holder = 0  # the serial of the prefix whose tensors are in the slots (0: none)

    def load(self, prefix: FlowPrefix) -> None:
        """Copy ``prefix``'s step tensors into the slots, unless they hold it already."""
        if self.holder == prefix_serial(prefix):
            return
        for slot, state in zip(self.build.slots, prefix.steps):
            for key, tensor in slot.tensors.items():
                tensor.copy_(state.tensors[key])
        self.holder = prefix_serial(prefix)


def prefix_serial(prefix: FlowPrefix) -> int:
    """A number no other prefix of this process has (``id()`` can be reused once a prefix is freed)."""
    serial = getattr(prefix, "_shared_graphs_serial", None)
    if serial is None:
        serial = next(_serials)
        prefix._shared_graphs_serial = serial
    return serial


class SharedFlowGraphs:
    """Owns the shared build and first-chunk graphs of one flow, by prefix length (at most ``max_lengths``)."""

    def __init__(self, max_lengths: int = MAX_LENGTHS):
        self.max_lengths = max_lengths
        self.lengths: OrderedDict[int, LengthGraphs] = OrderedDict()
        self.error: str | None = None
        self.captures = 0  # graphs captured so far (builds and chunks; tests and the bench read it)
        self.replays = 0  # builds and chunks served from a graph
        self.capture_seconds = 0.0

    def wanted(self, device: torch.device) -> bool:
        """CUDA, graphs wanted (both settings), and no capture of this flow has failed."""
        return self.error is None and cuda_graphs_on(device, "flow_shared_graphs")

    def clear(self) -> None:
        """Drop every graph and slot (the flow moved, or changed dtype)."""
        self.lengths.clear()

    def build(self, decoder, mu, mask, spks, cond) -> list[StepState] | None:
        """The recorded step states of a prefix over ``mu``'s frames (the voice's own copies), from the build
        graph of that length (captured now if there is none); None where capture failed (run it eagerly)."""
        entry = self._entry(decoder, mu, mask, spks, cond)
        if entry is None:
            return None
        entry.build.replay(mu, mask, spks, cond)
        self.replays += 1
        entry.holder = 0  # the slots now hold the new voice, whose prefix object does not exist yet
        steps = [StepState(s.frames, False, {k: t.clone() for k, t in s.tensors.items()}) for s in entry.build.slots]
        return steps

    def after_build(self, prefix: FlowPrefix) -> None:
        """Note that the slots of ``prefix``'s length hold ``prefix`` (it was just built from them)."""
        entry = self.lengths.get(prefix.frames)
        if entry is not None and entry.holder == 0:
            entry.holder = prefix_serial(prefix)

    def has_first_chunk(self, prefix: FlowPrefix) -> bool:
        """Whether a chunk graph after prefixes of ``prefix``'s length exists (nothing is left to capture ahead)."""
        entry = self.lengths.get(prefix.frames)
        return entry is not None and bool(entry.chunks)

    def applies(self, decoder, mu: torch.Tensor, prefix: FlowPrefix) -> bool:
        """Whether this chunk (``mu (B, 80, T)`` after ``prefix``) runs from a shared graph: :meth:`wanted`, at most
        one attention chunk of new frames, and a build graph of the prefix's length exists (the prefix was built
        by it, or another voice's of that length was)."""
        entry = self.lengths.get(prefix.frames)
        return (
            entry is not None
            and entry.signature == weights_signature(decoder)
            and mu.shape[-1] <= decoder.estimator.config.static_chunk_size
            and self.wanted(mu.device)
        )

    def sample(self, decoder, mu, mask, spks, cond, prefix: FlowPrefix) -> torch.Tensor:
        """What ``decoder(mu, mask, spks, cond, True, prefix.steps)`` gives, replayed from the shared chunk graph
        (captured now if there is none for this chunk length)."""
        entry = self.lengths[prefix.frames]
        self.lengths.move_to_end(prefix.frames)
        entry.load(prefix)
        frames = mu.shape[-1]
        graph = entry.chunks.get(frames)
        if graph is None:
            graph = self._capture(
                lambda: SamplerGraph(
                    decoder, decoder.start_noise(mu, entry.build.slots), mu, mask, spks, cond, entry.build.slots
                ),
                mu.device,
            )
            if graph is None:
                return decoder(mu, mask, spks, cond, True, prefix.steps)
            entry.chunks[frames] = graph
        self.replays += 1
        return graph.replay(mu, mask, spks, cond)

    def _entry(self, decoder, mu, mask, spks, cond) -> LengthGraphs | None:
        frames, signature = mu.shape[-1], weights_signature(decoder)
        entry = self.lengths.get(frames)
        if entry is not None and entry.signature != signature:  # the weights moved: every graph reads freed memory
            self.lengths.clear()
            entry = None
        if entry is None:
            build = self._capture(lambda: BuildGraph(decoder, mu, mask, spks, cond), mu.device)
            if build is None:
                return None
            entry = LengthGraphs(build, signature)
            self.lengths[frames] = entry
            while len(self.lengths) > self.max_lengths:
                self.lengths.popitem(last=False)
        self.lengths.move_to_end(frames)
        return entry

    def _capture(self, make, device: torch.device):
        started = time.perf_counter()
        made, why = try_cuda_capture(make, device)
        if made is None:
            self.error = f"CUDA graph capture of the shared flow graphs failed ({why}); running eagerly"
            log.warning(self.error)
            self.lengths.clear()
            return None
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        return made
