"""Running the speech LM's decoding steps: eager, or as CUDA graphs replayed per token.

At batch 1 a step is a few hundred small kernels, and launching them costs more than running
them. On CUDA the step is captured once per *length bucket* (the attention reads a fixed number
of cache slots, masking those not yet written) and replayed for every token, so the CPU launches
one graph instead of hundreds of kernels. Graphs need fixed addresses: the runner keeps one
cache per model and reuses it across requests, and re-captures when the cache, the RoPE table or
the weights move. Where capture is impossible the step runs eagerly (see :class:`DecodeRunner`).
``torch.compile`` of the same bucketed step is behind a flag (meant for MPS; off by default); on CUDA the
graphs capture it as torch.compile fused it (``DecodeOptions.fuse``, on by default).
In graphs mode the sampler runs on the device too (:mod:`device_sampling`, the host sampler's ids for the
same seed): each graph is the step and its pick (compiled as one when the step is fused), and the next
step is queued before the host reads this token, so the GPU does not wait for the host between tokens
(:meth:`DecodeRunner.sampled_tokens`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from cosyvoice_mac.device import cuda_graphs_wanted, env_flag, try_cuda_capture
from cosyvoice_mac.models.llm import eager_kernels
from cosyvoice_mac.models.llm.device_sampling import TOKEN, DeviceRas
from cosyvoice_mac.models.llm.kv_cache import StaticKVCache
from cosyvoice_mac.models.llm.qwen2 import Attend, attend_by_products, projection

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
    # CUDA graphs mode: capture the bucketed step (and the device sampler's pick) as torch.compile fused them (Triton
    # kernels under our graph), not ATen's ~450 kernels a token: 651 -> 805 tok/s at fp16 (bench/README.md, "Session
    # 7"); the compiles fall in the worker's warm-up (~60 s cold, ~11 s from the on-disk cache). A compile that fails
    # leaves the plain step (``fuse_error`` says why). Default mode and ``dynamic``: max-autotune changes the tokens.
    fuse: bool = field(default_factory=lambda: env_flag("COSYVOICE_FUSE_DECODE", True))
    # CUDA graphs mode: the sampler runs on the device inside each step's graph and the next step is queued
    # before this one's token is read (same tokens as the host sampler for the same seed; see device_sampling)
    device_sampling: bool = field(default_factory=lambda: env_flag("COSYVOICE_DEVICE_SAMPLING", True))
    # a decoded position's attention as two products and a softmax (``attend_by_products``) instead of SDPA; None:
    # exactly in graphs mode at float32, where CUDA's only fp32 SDPA kernel took 0.71 of a token's 1.83 ms of GPU time
    attention_by_products: bool | None = None
    # a compiled step's projections, norms, SDPA and SiLU*up as opaque operations (eager's kernels, or Triton kernels
    # rounding as ATen does) and its fused elementwise chains rounded as eager rounds them (inductor's
    # emulate_precision_casts), so it samples eager's tokens for the same seed. None (``COSYVOICE_EAGER_ROUNDING``
    # unset): where torch.compile runs the step at 16 bits, whose own rounding parted from eager's ids at token 6 (fp16)
    # or 1 (bf16). Measured at fp16 on the H200: 875 tok/s with eager's ids, against 803 for inductor's own rounding
    # (bench/README.md, "Session 10"). fp32's fused step keeps eager's ids without it.
    eager_rounding: bool | None = field(default_factory=lambda: env_flag("COSYVOICE_EAGER_ROUNDING", None))


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
        self.fuse_error: str | None = None  # why the fused step is not used (``fuse`` asked for)
        self.captures = 0  # graphs captured so far (tests and the bench read it)
        self.capture_seconds = 0.0  # host time spent capturing them
        self._cache: StaticKVCache | None = None
        self._signature: tuple = ()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._token: torch.Tensor | None = None
        self._logp: torch.Tensor | None = None
        self._compiled = None
        self._fused = None
        self._fused_with_pick = None
        self._plan = None  # the request's StepPlan (see start)
        self._head = None  # the request's speech-token head, a callable (see qwen2.projection)
        self._log_softmax = eager_kernels.plain_float_log_softmax  # its log-probabilities (see start)
        self._ticket = 0
        self._ras: DeviceRas | None = None
        self._sampled_graphs: dict[int, torch.cuda.CUDAGraph] = {}

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
        opaque = self.keeps_eager_rounding()
        self._plan = backbone.step_plan(self._attend(), opaque)
        self._head = projection(self.lm.llm_decoder, opaque)
        self._log_softmax = eager_kernels.float_log_softmax if opaque else eager_kernels.plain_float_log_softmax
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

    def _attend(self) -> Attend:
        """How a step attends (see ``DecodeOptions.attention_by_products``)."""
        wanted = self.options.attention_by_products
        if wanted is None:
            wanted = self.mode == "graphs" and self.lm.backbone.compute_dtype == torch.float32
        return attend_by_products if wanted else F.scaled_dot_product_attention

    def keeps_eager_rounding(self) -> bool:
        """Whether a compiled step keeps eager's rounding (see ``DecodeOptions.eager_rounding``)."""
        wanted = self.options.eager_rounding
        if wanted is None:
            compiled = self.mode == "compiled" or (self.mode == "graphs" and self.options.fuse)
            wanted = compiled and self.lm.backbone.compute_dtype in (torch.float16, torch.bfloat16)
        return wanted

    def report(self) -> dict:
        """What a benchmark reports of this runner: its graphs, and why a graph or a fused step is not in use."""
        return {
            "captures": self.captures,
            "capture_s": self.capture_seconds,
            "graph_error": self.graph_error,
            "fuse_error": self.fuse_error,
            "eager_rounding": self.keeps_eager_rounding(),
            "sampled_graphs": len(self._sampled_graphs),
            "fused_pick": self._fused_with_pick is not None,
        }

    def _compile(self, function, **settings):
        """torch.compile of a step function; keeping eager's rounding, the fused chains round as eager does."""
        if self.keeps_eager_rounding():
            settings["options"] = {"emulate_precision_casts": True}
        return torch.compile(function, **settings)

    def _current_signature(self) -> tuple:
        """What captured graphs depend on: the addresses of the weights and of the RoPE table, and the step's
        options (a graph captured with the plain step is no fused one)."""
        table = self.lm.backbone.rotary.table
        weights = tuple(p.data_ptr() for p in self.lm.parameters())
        options = (
            self.options.fuse,
            self.options.bucket,
            self.options.attention_by_products,
            self.keeps_eager_rounding(),
        )
        return (
            self.device,
            self.lm.backbone.compute_dtype,
            None if table is None else table.data_ptr(),
            weights,
            options,
        )

    def _drop(self) -> None:
        self._graphs.clear()
        self._sampled_graphs.clear()
        self._cache = None
        self._pool = None
        self._compiled = None
        self._fused = None
        self._fused_with_pick = None

    # steps ------------------------------------------------------------------------------------
    def _check(self, cache: StaticKVCache, ticket: int | None) -> None:
        if ticket is not None and ticket != self._ticket:
            raise RuntimeError("this decoder was superseded: a newer request started on the same speech LM")
        cache.check_room(1)

    def _span(self, cache: StaticKVCache) -> int:
        """Cache slots the next step attends over: the filled ones rounded up to the bucket."""
        return min(-(-(cache.length + 1) // self.options.bucket) * self.options.bucket, cache.capacity)

    def step(self, cache: StaticKVCache, ticket: int | None, token: int) -> torch.Tensor:
        """Feed speech id ``token`` at the next position; (V,) float32 log-probs on the device."""
        self._check(cache, ticket)
        mode = self.mode
        if mode == "eager":
            embed = self.lm.speech_embedding.weight[token].view(1, -1)
            logp = self._logp_of(self.lm.backbone.decode(embed, cache, cache.length + 1, plan=self._plan))
        else:
            span = self._span(cache)
            self._static_token().fill_(token)
            if mode == "compiled":
                if self._compiled is None:
                    self._compiled = self._compile(self._bucketed_step, dynamic=False)
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
        return self._log_softmax(self._head(hidden)).view(-1)

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
        try:
            logp = self._graph_step()(cache, span)  # this token's real step, and the capture's warm-up (and compile)
        except Exception as error:  # noqa: BLE001 (torch.compile failed here: capture the plain step)
            if self._fused is None:
                raise
            self.fuse_error = f"torch.compile of the decoding step failed ({type(error).__name__}: {error})"
            log.warning(self.fuse_error)
            logp = self._graph_step()(cache, span)
        captured, why = try_cuda_capture(lambda: self._capture(cache, span) or True, self.device)
        if not captured:
            self.graph_error = f"CUDA graph capture failed ({why}); decoding eagerly"
            log.warning(self.graph_error)
            self._graphs.clear()
        return logp

    def _graph_step(self):
        """What a graph captures: the bucketed step, or (``fuse``) torch.compile's fusion of it. Its default
        ``dynamic`` compiles the first bucket's span as a constant and the second as a symbol, so two compiles
        serve every bucket; a compile or capture that fails leaves the runner eager, as any failed capture does."""
        if not self.options.fuse or self.fuse_error is not None or self.mode != "graphs":
            return self._bucketed_step
        if self._fused is None:
            self._fused = self._compile(self._bucketed_step)
        return self._fused

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
            self._logp.copy_(self._graph_step()(cache, span))
        self._graphs[span] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started

    # sampling on the device ---------------------------------------------------------------------
    def samples_on_device(self, sampler, on_step) -> bool:
        """Whether :meth:`sampled_tokens` serves this request: graphs mode, a plain seeded RasSampler,
        and nobody asking to see each step's log-probabilities on the host."""
        return self.options.device_sampling and on_step is None and self.mode == "graphs" and DeviceRas.serves(sampler)

    def _sampler_state(self, sampler) -> DeviceRas:
        settings = DeviceRas.settings_of(sampler)
        ras = self._ras
        if ras is None or ras.settings != settings or ras.device != self.device:
            self._sampled_graphs.clear()  # they captured the old state's addresses
            self._fused_with_pick = None
            vocab = self.lm.config.speech_vocab_size
            ras = self._ras = DeviceRas(settings, self.lm.masked_before_min_len, vocab, self.device)
        return ras

    def sampled_tokens(self, embeds: torch.Tensor, min_len: int, max_len: int, sampler, stop_ids) -> Iterator[int]:
        """Decode up to ``max_len`` ids sampled on the device (the host sampler's ids for the same seed).

        ``embeds`` (1, L, D) on the model's device and dtype; the stop id ends it and is not yielded.
        Step t+1 is queued (its input, token t, is already on the device) before the host waits for
        token t, so the GPU never idles on the host; a stop costs one step computed for nothing.
        """
        cache, ticket = self.start(embeds.shape[1] + max_len)
        ras = self._sampler_state(sampler)
        request = ras.begin(sampler, min_len)
        hidden = self.lm.backbone(embeds, cache)  # the prefill, eagerly (its length varies)
        ras.pick(self._logp_of(hidden[0, -1:]), self._static_token())
        reading, known_offset = self._send(ras), 0
        try:
            for step in range(max_len):
                queued = None
                if step + 1 < max_len:
                    self._check(cache, ticket)
                    ras.top_up(known_offset)
                    self._sampled_step(cache, self._span(cache), ras)
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
        if self.device.type != "cuda":
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
        graph = self._sampled_graphs.get(span) if self.mode == "graphs" else None
        if graph is not None:
            graph.replay()
            return
        try:
            self._sampled_graph_step()(cache, span)  # this token's real step and pick (and the warm-up, the compile)
        except Exception as error:  # noqa: BLE001 (torch.compile failed here: capture the plain step and pick)
            if self._fused_with_pick is None:
                raise
            self.fuse_error = f"torch.compile of the sampled decoding step failed ({type(error).__name__}: {error})"
            log.warning(self.fuse_error)
            self._sampled_graph_step()(cache, span)
        if self.mode != "graphs":
            return

        def capture():
            started = time.perf_counter()
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                self._sampled_graph_step()(cache, span)
            self._sampled_graphs[span] = graph
            self.captures += 1
            self.capture_seconds += time.perf_counter() - started
            return True

        captured, why = try_cuda_capture(capture, self.device)
        if not captured:
            self.graph_error = f"CUDA graph capture of the sampled step failed ({why}); decoding eagerly"
            log.warning(self.graph_error)
            self._sampled_graphs.clear()

    def _step_and_pick(self, cache: StaticKVCache, span: int) -> None:
        """The bucketed step over ``span`` slots and the device sampler's pick of its token into ``_token``."""
        self._ras.pick(self._bucketed_step(cache, span), self._token)

    def _sampled_graph_step(self):
        """What a sampled step's graph captures: the step and the pick, compiled as one (``fuse``) so torch.compile
        fuses the pick's ~45 small operations too (a compile failure leaves them plain, as for the step alone)."""
        if not self.options.fuse or self.fuse_error is not None or self.mode != "graphs":
            return self._step_and_pick
        if self._fused_with_pick is None:
            self._fused_with_pick = self._compile(self._step_and_pick)
        return self._fused_with_pick
