"""Running the speech LM's decoding steps: eager, or as CUDA graphs replayed per token.

At batch 1 a step is a few hundred small kernels, and launching them costs more than running
them. On CUDA the step is captured once per *length bucket* (the attention reads a fixed number
of cache slots, masking those not yet written) and replayed for every token, so the CPU launches
one graph instead of hundreds of kernels. Graphs need fixed addresses: the runner keeps one
cache per model and reuses it across requests, and re-captures when the cache, the RoPE table or
the weights move. Where capture is impossible the step runs eagerly (see :class:`DecodeRunner`).
``torch.compile`` of the same bucketed step is behind a flag (meant for MPS; off by default).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from cosyvoice_mac.device import cuda_graphs_wanted, env_flag, try_cuda_capture
from cosyvoice_mac.models.llm.kv_cache import StaticKVCache

if TYPE_CHECKING:
    from cosyvoice_mac.models.llm.speech_lm import SpeechLM

log = logging.getLogger(__name__)
CACHE_GRANULE = 1024  # a reused cache grows in these steps, so most requests fit the one already there


@dataclass
class DecodeOptions:
    """How a speech LM runs its decoding steps (defaults from ``COSYVOICE_CUDA_GRAPHS`` and
    ``COSYVOICE_COMPILE_DECODE``, so a run can switch them without code)."""

    # on CUDA: capture the step per length bucket, replay it per token
    cuda_graphs: bool = field(default_factory=cuda_graphs_wanted)
    # torch.compile the bucketed step (any device; meant for MPS, where it is not measured yet): off by default
    compile: bool = field(default_factory=lambda: env_flag("COSYVOICE_COMPILE_DECODE", False))
    bucket: int = 128  # cache slots per length bucket; a multiple of 16 keeps the attention mask aligned


class DecodeRunner:
    """Owns how one SpeechLM runs decoding steps: the mode, the reused cache, the CUDA graphs.

    Modes: *eager* (CPU, MPS, or when asked): a fresh cache per request, attention over exactly
    the filled slots. *Graphs* (CUDA): one cache reused by every request; per length bucket the
    step is run once eagerly, then captured and replayed. *Compiled*: the bucketed step through
    ``torch.compile``. Eager fallbacks: the prefill (its length varies per request) always runs
    eagerly; a capture that fails (an operation that syncs with the host, such as a quantised
    layer that inspects its output) makes the runner eager for good, and ``graph_error`` says why.
    In the graph and compiled modes only the newest request's decoder may step: the reused cache
    is shared.
    """

    def __init__(self, lm: SpeechLM, options: DecodeOptions | None = None):
        self.lm = lm
        self.options = options or DecodeOptions()
        self.graph_error: str | None = None
        self.captures = 0  # graphs captured so far (tests and the bench read it)
        self.capture_seconds = 0.0  # host time spent capturing them
        self._cache: StaticKVCache | None = None
        self._signature: tuple = ()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._token: torch.Tensor | None = None
        self._logp: torch.Tensor | None = None
        self._compiled = None
        self._plan: list = []
        self._ticket = 0

    # modes ------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.lm.speech_embedding.weight.device

    @property
    def mode(self) -> str:
        """``graphs``, ``compiled`` or ``eager``: what the next step will do."""
        if self.options.compile:
            return "compiled"
        if self.options.cuda_graphs and self.device.type == "cuda" and self.graph_error is None:
            return "graphs"
        return "eager"

    # requests ---------------------------------------------------------------------------------
    def start(self, capacity: int) -> tuple[StaticKVCache, int | None]:
        """A cache with room for ``capacity`` positions, and the ticket its decoder steps with
        (None for an eager decoder's own cache, which no later request can take over)."""
        backbone = self.lm.backbone
        self._plan = backbone.step_plan()
        if self.mode == "eager":
            return backbone.new_cache(capacity), None
        self._ticket += 1
        rounded = min(-(-capacity // CACHE_GRANULE) * CACHE_GRANULE, backbone.config.max_position_embeddings)
        cache = self._cache
        if cache is None or cache.capacity < capacity or self._signature != self._current_signature():
            self._drop()
            cache = self._cache = backbone.new_cache(max(rounded, capacity))
            self._signature = self._current_signature()
        else:
            cache.reset()
            cache.kv.zero_()  # a masked slot must hold a finite value: stale NaNs would leak through
        return cache, self._ticket

    def _current_signature(self) -> tuple:
        """What captured graphs depend on: the addresses of the weights and of the RoPE table."""
        table = self.lm.backbone.rotary.table
        weights = tuple(p.data_ptr() for p in self.lm.parameters())
        return self.device, self.lm.backbone.compute_dtype, None if table is None else table.data_ptr(), weights

    def _drop(self) -> None:
        self._graphs.clear()
        self._cache = None
        self._pool = None
        self._compiled = None

    # steps ------------------------------------------------------------------------------------
    def step(self, cache: StaticKVCache, ticket: int | None, token: int) -> torch.Tensor:
        """Feed speech id ``token`` at the next position; (V,) float32 log-probs on the device."""
        if ticket is not None and ticket != self._ticket:
            raise RuntimeError("this decoder was superseded: a newer request started on the same speech LM")
        cache.check_room(1)
        mode = self.mode
        if mode == "eager":
            embed = self.lm.speech_embedding.weight[token].view(1, -1)
            logp = self._logp_of(self.lm.backbone.decode(embed, cache, cache.length + 1, plan=self._plan))
        else:
            span = min(-(-(cache.length + 1) // self.options.bucket) * self.options.bucket, cache.capacity)
            self._static_token().fill_(token)
            if mode == "compiled":
                if self._compiled is None:
                    self._compiled = torch.compile(self._bucketed_step, dynamic=False)
                logp = self._compiled(cache, span)
            else:
                logp = self._replay(cache, span)
        cache.length += 1
        return logp

    def _static_token(self) -> torch.Tensor:
        if self._token is None or self._token.device != self.device:
            self._token = torch.zeros(1, dtype=torch.long, device=self.device)
        return self._token

    def _logp_of(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden (1, D) -> (V,) float32 log-probabilities over the speech vocabulary."""
        return self.lm.llm_decoder(hidden).float().log_softmax(dim=-1).view(-1)

    def _bucketed_step(self, cache: StaticKVCache, span: int) -> torch.Tensor:
        """The step over ``span`` slots, reading only tensors with fixed addresses (capturable)."""
        embed = F.embedding(self._token, self.lm.speech_embedding.weight)
        unwritten = cache.slots[:span] > cache.position
        bias = torch.zeros(1, span, device=embed.device, dtype=embed.dtype).masked_fill_(unwritten, float("-inf"))
        return self._logp_of(self.lm.backbone.decode(embed, cache, span, bias, plan=self._plan))

    def _replay(self, cache: StaticKVCache, span: int) -> torch.Tensor:
        graph = self._graphs.get(span)
        if graph is not None:
            graph.replay()
            return self._logp
        logp = self._bucketed_step(cache, span)  # this token's real step, and the capture's warm-up
        captured, why = try_cuda_capture(lambda: self._capture(cache, span) or True, self.device)
        if not captured:
            self.graph_error = f"CUDA graph capture failed ({why}); decoding eagerly"
            log.warning(self.graph_error)
            self._graphs.clear()
        return logp

    def _capture(self, cache: StaticKVCache, span: int) -> None:
        """Record (not run) the step over ``span`` slots; its output lands in the shared ``_logp``."""
        if self._logp is None or self._logp.device != self.device:
            self._logp = torch.empty(self.lm.config.speech_vocab_size, device=self.device)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the flow may issue work from another thread while the LLM thread captures.
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            self._logp.copy_(self._bucketed_step(cache, span))
        self._graphs[span] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
