"""CUDA graphs of the whole (non-streaming) flow sampler, one per padded length bucket.

A sentence's flow runs 10 Euler steps of the estimator at classifier-free batch 2 over the prompt's and
the sentence's mel frames: ~10 000 small kernels, so on an H200 it is bound by the host launching them
(bench/README.md: the bench's 660 frames take 0.36-0.39 s eagerly, while the GPU is busy 0.22 s in fp32
and 0.05 s in bf16). Replayed as one graph a call costs its GPU time. But every sentence has its own
length, so a graph per exact length would rarely be replayed. Here a call is padded at its end up to a
bucket of ``BUCKET_FRAMES`` frames, as the LLM's steps are padded to 128-slot buckets, and one graph
serves every length of its bucket:

* the padded frames are masked: both estimators attend only to valid keys and their convolutions are
  causal, so no padded frame reaches a valid one, and the valid frames equal the unpadded call's up to
  the kernels' rounding (tests/test_flow_length_graphs.py compares the sampler over padded_inputs with the plain one);
* the start noise is the fixed buffer's first frames whatever the length, so the bucket's noise is one
  static tensor.

Only a 16-bit flow is captured. Measured on an H200 (bench/flow_length_graphs.py, 660 frames): bf16 eager
242 ms with the GPU busy 60, its graph 66 ms; fp32 eager 240 ms with the GPU busy 221 (strict fp32 matrix
products), its graph 228 ms. A float32 flow is bound by the GPU, so a graph would save ~5 % for a capture
of about an eager call's cost and ~0.5 GB of pool.

The flow's first call in a process runs eagerly (it loads the kernels a capture then records); after it,
a bucket is captured on its first call (recording the kernels costs about what launching them eagerly does)
and replayed on every later one. At most ``MAX_BUCKETS`` graphs are held (the least recently used goes);
they share one memory pool, since only one replays at a time and each holds its own output. Moving or
casting the flow drops them (:meth:`Flow._apply`); a failed capture leaves this flow eager for good
(``error`` says why). ``COSYVOICE_FLOW_LENGTH_GRAPHS=0`` turns this off (``COSYVOICE_CUDA_GRAPHS=0`` turns
every graph off).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

import torch
import torch.nn.functional as F

from cosyvoice_mac.device import cuda_graphs_on, try_cuda_capture, weights_signature

log = logging.getLogger(__name__)

BUCKET_FRAMES = 64  # 1.28 s of mel: at most 63 padded frames, under 10 % of a 660-frame sentence's work
MAX_BUCKETS = 8  # graphs held at once (lengths up to ~10 s apart); their pool is the largest one's activations
GRAPHED_DTYPES = (torch.float16, torch.bfloat16)  # launch-bound flows; a float32 one is bound by the GPU (above)


def bucket_frames(frames: int) -> int:
    """The padded length of a call of ``frames`` mel frames: the next multiple of ``BUCKET_FRAMES``."""
    return -(-frames // BUCKET_FRAMES) * BUCKET_FRAMES


def padded_inputs(mu: torch.Tensor, mask: torch.Tensor, cond: torch.Tensor, frames: int):
    """``mu, cond (B, 80, T)`` and ``mask (B, 1, T)`` padded with zeros at the end to ``frames`` (masked out)."""
    pad = (0, frames - mu.shape[-1])
    return F.pad(mu, pad), F.pad(mask, pad), F.pad(cond, pad)


class BucketGraph:
    """Owns one captured sampler over ``frames`` padded frames: the static inputs (``mu``, ``cond`` ``(B, 80, F)``,
    ``mask`` ``(B, 1, F)``, ``spks`` ``(B, 80)``, the start noise) and the output mel ``(B, 80, F)``."""

    def __init__(self, decoder, mu, mask, spks, cond, frames: int, pool):
        self.frames = frames
        self.mu, self.mask, self.cond = padded_inputs(mu, mask, cond, frames)
        self.spks = spks.clone()
        self.noise = decoder.start_noise(self.mu).clone()
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another thread may issue work on the device while this one captures.
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.output = decoder.solve(self.noise, self.mu, self.mask, self.spks, self.cond, False, None)

    def replay(self, mu, mask, spks, cond) -> torch.Tensor:
        """The mel ``(B, 80, T)`` of these inputs (``T`` <= the bucket), a fresh tensor."""
        length = mu.shape[-1]
        for static, value in ((self.mu, mu), (self.cond, cond), (self.mask, mask)):
            static[..., :length].copy_(value)
            static[..., length:].zero_()
        self.spks.copy_(spks)
        self.graph.replay()
        return self.output[:, :, :length].clone()


class LengthGraphs:
    """Owns one flow's bucket graphs (at most ``max_buckets``, least recently used dropped), their shared memory
    pool, and whether the flow's kernels were loaded by an eager call."""

    def __init__(self, max_buckets: int = MAX_BUCKETS):
        self.max_buckets = max_buckets
        self.graphs: OrderedDict[int, BucketGraph] = OrderedDict()
        self.kernels_loaded = False
        self.signature: tuple | None = None
        self.pool = None
        self.error: str | None = None
        self.captures = 0  # graphs captured so far (tests and the bench read them)
        self.replays = 0
        self.capture_seconds = 0.0

    def wanted(self, device: torch.device, dtype: torch.dtype) -> bool:
        """CUDA, a 16-bit flow (``dtype``), graphs wanted (both settings), and no capture of this flow has failed."""
        return dtype in GRAPHED_DTYPES and self.error is None and cuda_graphs_on(device, "flow_length_graphs")

    def clear(self) -> None:
        """Drop every graph (the flow moved, or changed dtype)."""
        self.graphs.clear()
        self.pool = None
        self.signature = None

    def sample(self, decoder, mu, mask, spks, cond) -> torch.Tensor:
        """What ``decoder(mu, mask, spks, cond)`` gives (non-streaming, ``mu (B, 80, T)``): replayed from the graph
        of ``T``'s bucket, captured now if there is none (eagerly on the flow's first call)."""
        frames = bucket_frames(mu.shape[-1])
        signature = weights_signature(decoder)
        if signature != self.signature:  # the weights moved: every graph reads freed memory
            self.clear()
            self.signature = signature
        graph = self.graphs.get(frames)
        if graph is None:
            if not self.kernels_loaded:
                self.kernels_loaded = True
                return decoder(mu, mask, spks, cond)
            graph = self._capture(decoder, mu, mask, spks, cond, frames)
            if graph is None:
                return decoder(mu, mask, spks, cond)
        self.graphs.move_to_end(frames)
        self.replays += 1
        return graph.replay(mu, mask, spks, cond)

    def _capture(self, decoder, mu, mask, spks, cond, frames: int) -> BucketGraph | None:
        while len(self.graphs) >= self.max_buckets:
            self.graphs.popitem(last=False)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        started = time.perf_counter()
        graph, why = try_cuda_capture(lambda: BucketGraph(decoder, mu, mask, spks, cond, frames, self.pool), mu.device)
        if graph is None:
            self.error = f"CUDA graph capture of the whole flow failed ({why}); running eagerly"
            log.warning(self.error)
            self.clear()
            return None
        self.graphs[frames] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        return graph
