"""Running the speech LM's decoding steps: eager, compiled, or as CUDA graphs replayed per token.

*Eager* (CPU, MPS, or when asked): a fresh cache per request, attention over exactly the filled slots.
``torch.compile`` of a bucketed step is behind a flag (meant for MPS; off by default). On CUDA the step is
captured once per length bucket and replayed per token, with the sampler on the device
(:mod:`cosyvoice_mac.models.cuda.decode_graphs`, imported only when graphs mode runs: the CPU, MPS and MLX
never load the CUDA tuning).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from cosyvoice_mac.device import cuda_graphs_wanted
from cosyvoice_mac.models.llm.decode_step import Attend, projection
from cosyvoice_mac.models.llm.kv_cache import StaticKVCache
from cosyvoice_mac.models.llm.step_kernels import PLAIN, StepKernels
from cosyvoice_mac.settings import env_flag

if TYPE_CHECKING:
    from cosyvoice_mac.models.cuda.decode_graphs import DecodeGraphs
    from cosyvoice_mac.models.llm.speech_lm import SpeechLM

CACHE_GRANULE = 1024  # a reused cache grows in these steps, so most requests fit the one already there


@dataclass
class DecodeOptions:
    """How a speech LM runs its decoding steps (defaults from ``COSYVOICE_CUDA_GRAPHS`` and
    ``COSYVOICE_COMPILE_DECODE``, so a run can switch them without code)."""

    # on CUDA: capture the step per length bucket, replay it per token
    cuda_graphs: bool = field(default_factory=cuda_graphs_wanted)
    # torch.compile the bucketed step (any device; meant for MPS, where it is not measured yet): off by default
    compile: bool = field(default_factory=lambda: env_flag("compile_decode"))
    bucket: int = 128  # cache slots per length bucket; a multiple of 16 keeps the attention mask aligned
    # CUDA graphs mode: capture the bucketed step (and the device sampler's pick) as torch.compile fused them (Triton
    # kernels under our graph), not ATen's ~450 kernels a token: 651 -> 805 tok/s at fp16 (bench/README.md, "Session
    # 7"); the compiles fall in the worker's warm-up (~60 s cold, ~11 s from the on-disk cache). A compile that fails
    # leaves the plain step (``fuse_error`` says why). Default mode and ``dynamic``: max-autotune changes the tokens.
    fuse: bool = field(default_factory=lambda: env_flag("fuse_decode"))
    # CUDA graphs mode: the sampler runs on the device inside each step's graph and the next step is queued
    # before this one's token is read (same tokens as the host sampler for the same seed; see cuda/device_sampling)
    device_sampling: bool = field(default_factory=lambda: env_flag("device_sampling"))
    # a decoded position's attention as two products and a softmax (``attend_by_products``) instead of SDPA; None:
    # exactly in graphs mode at float32, where CUDA's only fp32 SDPA kernel took 0.71 of a token's 1.83 ms of GPU time
    attention_by_products: bool | None = None
    # a compiled step's projections, norms, SDPA and SiLU*up as opaque operations (eager's kernels, or Triton kernels
    # rounding as ATen does) and its fused elementwise chains rounded as eager rounds them (inductor's
    # emulate_precision_casts), so it samples eager's tokens for the same seed. None (``COSYVOICE_EAGER_ROUNDING``
    # unset): where torch.compile runs the step at 16 bits, whose own rounding parted from eager's ids at token 6 (fp16)
    # or 1 (bf16). Measured at fp16 on the H200: 875 tok/s with eager's ids, against 803 for inductor's own rounding
    # (bench/README.md, "Session 10"). fp32's fused step keeps eager's ids without it.
    eager_rounding: bool | None = field(default_factory=lambda: env_flag("eager_rounding"))


class DecodeRunner:
    """Owns how one SpeechLM runs decoding steps: the mode, the reused cache, the step's kernels.

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
        self._token: torch.Tensor | None = None
        self._compiled = None
        self._plan = None  # the request's StepPlan (see start)
        self._head = None  # the request's speech-token head, a callable (see decode_step.projection)
        self._log_softmax = PLAIN.log_softmax  # its log-probabilities (see start)
        self._ticket = 0
        self._cuda: DecodeGraphs | None = None  # graphs mode's graphs (see cuda_graphs)

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

    def batch_step_runner(self):
        """What runs a batch's step in graphs mode (``models/cuda/batch_graph.BatchStepGraph``: captured once, then
        replayed per token), or None: the batch decodes eagerly."""
        if self.mode != "graphs":
            return None
        from cosyvoice_mac.models.cuda.batch_graph import BatchStepGraph  # CUDA tuning, loaded only in graphs mode

        return BatchStepGraph

    # requests ---------------------------------------------------------------------------------
    def start(self, capacity: int) -> tuple[StaticKVCache, int | None]:
        """A cache with room for ``capacity`` positions, and the ticket its decoder steps with
        (None for an eager decoder's own cache, which no later request can take over)."""
        backbone = self.lm.backbone
        kernels = self._kernels()
        self._plan = backbone.step_plan(self._attend(), kernels)
        self._head = projection(self.lm.llm_decoder, kernels)
        self._log_softmax = kernels.log_softmax
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
        if not wanted:
            return F.scaled_dot_product_attention
        from cosyvoice_mac.models.cuda import products  # CUDA's fp32 tuning, loaded only where it is asked for

        return products.attend_by_products

    def _kernels(self) -> StepKernels:
        """The step's kernels: eager's rounding kept under torch.compile (see ``keeps_eager_rounding``), or plain."""
        if not self.keeps_eager_rounding():
            return PLAIN
        from cosyvoice_mac.models.cuda.eager_kernels import EAGER_ROUNDING  # loaded only for a compiled 16-bit step

        return EAGER_ROUNDING

    def cuda_graphs(self) -> DecodeGraphs:
        """Graphs mode's CUDA graphs and device sampler (``models/cuda/decode_graphs.py``), made on first use: the
        CUDA tuning is imported here only, so eager decoding on the CPU or MPS never loads it."""
        if self._cuda is None:
            from cosyvoice_mac.models.cuda.decode_graphs import DecodeGraphs

            self._cuda = DecodeGraphs(self)
        return self._cuda

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
            "sampled_graphs": 0 if self._cuda is None else len(self._cuda.sampled_graphs),
            "fused_pick": self._cuda is not None and self._cuda.fused_with_pick is not None,
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
        self._cache = None
        self._compiled = None
        if self._cuda is not None:
            self._cuda.drop()

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
                logp = self.cuda_graphs().step(cache, span)
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

    # sampling on the device ---------------------------------------------------------------------
    def samples_on_device(self, sampler, on_step) -> bool:
        """Whether :meth:`sampled_tokens` serves this request: graphs mode, a plain seeded RasSampler,
        and nobody asking to see each step's log-probabilities on the host."""
        return (
            self.options.device_sampling
            and on_step is None
            and self.mode == "graphs"
            and self.cuda_graphs().serves(sampler)
        )

    def sampled_tokens(self, embeds: torch.Tensor, min_len: int, max_len: int, sampler, stop_ids) -> Iterator[int]:
        """Decode up to ``max_len`` ids sampled on the device inside the steps' graphs (the host sampler's ids for
        the same seed); the stop id ends it and is not yielded (``DecodeGraphs.sampled_tokens``)."""
        return self.cuda_graphs().sampled_tokens(embeds, min_len, max_len, sampler, stop_ids)
