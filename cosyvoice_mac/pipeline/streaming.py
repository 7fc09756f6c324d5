"""Streaming synthesis: audio chunks while the LLM is still decoding (spec 8.3).

The LLM runs ahead in a producer thread; the consumer turns each hop of tokens into mel with the
chunk-causal flow (3 tokens of look-ahead) and into audio with the vocoder, stitched so that the
chunks join seamlessly. The hop schedule lives in this request only: upstream keeps it on the model
and never resets it, so its later requests start with 100-token hops (PR #1849).

Chunk borders must fall on the flow's 25-token attention grid, which counts the prompt too. Upstream
makes its first hop 25 tokens plus whatever completes the prompt's last, partial chunk. We instead
cut the START of the flow's prompt (never the LLM's) so that its last chunk lacks exactly
``FIRST_HOP_TOKENS`` tokens, and make the first hop just those: every flow call still ends on the
grid, so each chunk's mel is what upstream computes for it, but the first audio needs 10 + 3 tokens
instead of 25 + 3 or more. The prompt's whole chunks before that are the voice's cached flow prefix
(:class:`FlowPrefixCache`): the first call computes one 50-frame chunk per Euler step, whatever the
prompt's length. The prefix holds at most ``MAX_PREFIX_TOKENS`` (longer prompts lose their start
in streaming only: the cache costs ~4.6 MB (v2) / 3.6 MB (v3) per frame in fp32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from cosyvoice_mac.device import serialize_device_work
from cosyvoice_mac.models.flow.flow import Flow
from cosyvoice_mac.models.flow.prefix import FlowPrefix
from cosyvoice_mac.models.vocoder.hift import HiFT
from cosyvoice_mac.pipeline.producer import DecodeThread, DeviceTurns, TokenProducer  # noqa: F401 (re-export)

FIRST_HOP_TOKENS = 10  # the first chunk completes the flow prompt's last attention chunk
SECOND_HOP_TOKENS = 25  # then 50, then 100 for every later chunk (upstream's growth)
MAX_HOP_TOKENS = 100
FLOW_CHUNK_TOKENS = 25  # the flow's static chunk (50 mel frames)
MAX_PREFIX_TOKENS = 75  # 3 s of prompt cached per voice: ~690 MB (v2) / 540 MB (v3) in fp32
LOW_MEMORY_PREFIX_TOKENS = 25
V2_MEL_CACHE_FRAMES = 8
V2_SOURCE_CACHE_SAMPLES = 8 * 480
# Devices where the LLM waits at the first chunk's tokens until that chunk is made (MPS takes turns instead).
HOLD_LLM_FOR_FIRST_CHUNK = ("cpu", "cuda")


@dataclass
class Chunk:
    audio: np.ndarray  # (n,) float32 at 24 kHz
    tokens_so_far: int
    is_final: bool
    notes: list[str] = field(default_factory=list)  # e.g. this chunk's flow was redone in float32


class CausalStitcher:
    """CosyVoice3: the causal vocoder runs on the mel so far but decodes only from the first unsent frame.

    Every call emits a whole number of frames, so the next one starts at ``first_frame = emitted / 480``
    and the vocoder decodes just the new frames plus its causal context: the work per chunk is bounded
    instead of growing with the sentence (f0 and phase still cover all frames: they are cheap).
    """

    def __init__(self, vocode: Callable[..., torch.Tensor], samples_per_frame: int = 480):
        self.vocode = vocode
        self.samples_per_frame = samples_per_frame
        self.mel: torch.Tensor | None = None
        self.emitted = 0

    def add(self, mel: torch.Tensor, final: bool) -> np.ndarray:
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=2)
        fresh = self.vocode(self.mel, finalize=final, first_frame=self.emitted // self.samples_per_frame)[0]
        self.emitted += fresh.shape[0]
        return fresh.float().cpu().numpy()


class CrossfadeStitcher:
    """CosyVoice2: each chunk is vocoded with 8 frames of mel context and the previous source tail,
    then its first 3840 samples are cross-faded (Hamming) into the held-back tail of the last chunk."""

    def __init__(self, vocode: Callable[..., tuple[torch.Tensor, torch.Tensor]]):
        self.vocode = vocode
        self.mel_tail: torch.Tensor | None = None
        self.source_tail: torch.Tensor | None = None
        self.wave_tail: torch.Tensor | None = None
        window = torch.from_numpy(np.hamming(2 * V2_SOURCE_CACHE_SAMPLES).astype(np.float32))
        self.fade_in, self.fade_out = window[:V2_SOURCE_CACHE_SAMPLES], window[V2_SOURCE_CACHE_SAMPLES:]

    def add(self, mel: torch.Tensor, final: bool) -> np.ndarray:
        if self.mel_tail is not None:
            mel = torch.cat([self.mel_tail, mel], dim=2)
        wave, source = self.vocode(mel, cache_source=self.source_tail)
        wave = wave[0].float().cpu()
        if self.wave_tail is not None:
            head = wave[:V2_SOURCE_CACHE_SAMPLES] * self.fade_in + self.wave_tail * self.fade_out
            wave = torch.cat([head, wave[V2_SOURCE_CACHE_SAMPLES:]])
        if final:
            return wave.numpy()
        self.mel_tail = mel[:, :, -V2_MEL_CACHE_FRAMES:]
        self.source_tail = source[:, :, -V2_SOURCE_CACHE_SAMPLES:]
        self.wave_tail = wave[-V2_SOURCE_CACHE_SAMPLES:]
        return wave[:-V2_SOURCE_CACHE_SAMPLES].numpy()


@dataclass(frozen=True)
class PromptPlan:
    """How a request streams with a prompt of ``prompt_tokens`` tokens: ``cut`` tokens dropped from the
    flow prompt's start, a ``first_hop`` that ends on the chunk grid, and the cached ``prefix_tokens``."""

    cut: int
    first_hop: int
    prefix_tokens: int

    @classmethod
    def for_prompt(
        cls,
        prompt_tokens: int,
        first_hop: int = FIRST_HOP_TOKENS,
        lookahead: int = 3,
        max_prefix: int = MAX_PREFIX_TOKENS,
    ) -> "PromptPlan":
        chunk = FLOW_CHUNK_TOKENS
        if not 1 <= first_hop <= chunk - lookahead:
            raise ValueError(f"the first hop must be 1..{chunk - lookahead} tokens, got {first_hop}")
        cut = (prompt_tokens + first_hop) % chunk
        if cut >= prompt_tokens:  # a prompt shorter than one chunk: complete its chunk, cache nothing
            return cls(cut=0, first_hop=(-prompt_tokens) % chunk or chunk, prefix_tokens=0)
        prefix = prompt_tokens - cut - (chunk - first_hop)
        dropped = math.ceil(max(0, prefix - max_prefix) / chunk) * chunk
        return cls(cut=cut + dropped, first_hop=first_hop, prefix_tokens=prefix - dropped)

    @classmethod
    def for_request(cls, parts: StreamingParts, speaker, first_hop: int = FIRST_HOP_TOKENS) -> "PromptPlan":
        """The plan for ``speaker``'s prompt with these parts (the flow's look-ahead, the parts' prefix bound)."""
        return cls.for_prompt(
            speaker.speech_tokens.shape[1], first_hop, parts.flow.config.pre_lookahead_len, parts.max_prefix_tokens
        )

    def prompt(self, speaker, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The flow's prompt for this plan: (tokens (1, P - cut), mel (1, 2 (P - cut), 80), embedding) on ``device``."""
        tokens, mel = speaker.speech_tokens[:, self.cut :], speaker.mel[:, 2 * self.cut :]
        return tokens.to(device), mel.to(device), speaker.embedding.to(device)


def hop_schedule(first_hop: int) -> Iterator[int]:
    """Tokens per chunk: ``first_hop``, 25, 50, then 100 for ever (a new schedule for every request)."""
    yield first_hop
    hop = SECOND_HOP_TOKENS
    while True:
        yield hop
        hop = min(MAX_HOP_TOKENS, 2 * hop)


class FlowPrefixCache:
    """Owns the flow prefixes of the most recent voices (a small LRU: each is hundreds of MB at full size)."""

    def __init__(self, capacity: int = 1):
        self.capacity = capacity
        self.builds = 0  # prefixes built by a call of their own so far (a status figure; not those recorded by a chunk)
        self._entries: dict[tuple, FlowPrefix] = {}

    def get(self, flow, speaker, plan: PromptPlan, prompt) -> FlowPrefix | None:
        """The cached prefix for this voice and plan, building it on a miss; None when the plan caches nothing."""
        if not self.caches(plan):
            return None
        prefix = self.cached(flow, speaker, plan, prompt)
        if prefix is None:
            prefix = flow.build_prefix(*prompt, tokens=plan.prefix_tokens)
            self.builds += 1
            self.add(flow, speaker, plan, prefix)
        return prefix

    def caches(self, plan: PromptPlan) -> bool:
        """Whether requests of this plan use a cached prefix."""
        return plan.prefix_tokens > 0 and self.capacity > 0

    def cached(self, flow, speaker, plan: PromptPlan, prompt) -> FlowPrefix | None:
        """The voice's prefix if it is cached (now the most recently used), else None; nothing is built."""
        key = self._key(flow, speaker, plan)
        prefix = self._entries.pop(key, None)
        if prefix is None or not prefix.matches(prompt[0], prompt[2]):
            return None
        self._entries[key] = prefix
        return prefix

    def add(self, flow, speaker, plan: PromptPlan, prefix: FlowPrefix) -> None:
        """Keep ``prefix`` (made for this voice and plan) as the most recently used; the oldest goes past capacity."""
        key = self._key(flow, speaker, plan)
        self._entries.pop(key, None)
        self._entries[key] = prefix
        while len(self._entries) > self.capacity:
            self._entries.pop(next(iter(self._entries)))

    @staticmethod
    def _key(flow, speaker, plan: PromptPlan) -> tuple:
        weight = next(flow.parameters())
        return speaker.audio_hash, plan.cut, plan.prefix_tokens, str(weight.device), weight.dtype

    def clear(self) -> None:
        self._entries.clear()


@dataclass(frozen=True)
class StreamingParts:
    """What streaming needs from a loaded model, and nothing more: the networks it runs, the version's
    stitcher, the voices' prefix cache and the widening of a flow whose mel came out non-finite.

    Built afresh for each request (:meth:`CosyVoice.streaming_parts`), so a model that moved or changed
    engine hands over its current networks.
    """

    flow: Flow  # the chunk-causal flow
    vocoder: HiFT  # the torch HiFT (a swapped-in vocoder does not stream)
    stitcher: str  # "causal" (CosyVoice3) or "crossfade" (CosyVoice2): the version spec's
    prefixes: FlowPrefixCache
    max_prefix_tokens: int = MAX_PREFIX_TOKENS  # LOW_MEMORY_PREFIX_TOKENS in low-memory mode
    widen_flow: Callable[[list[str]], bool] = lambda notes: False  # True when the flow now runs in float32
    decode_thread: DecodeThread | None = None  # the model's long-lived LLM thread (None: one per sentence)
    takes_turns: bool = False  # the LLM and the chunks take turns whatever the torch device (MLX: always)
    settle_llm_step: Callable[[], None] | None = None  # waits for an LLM step's queued work (MLX: synchronize)

    @property
    def device(self) -> torch.device:
        return next(self.flow.parameters()).device

    def make_stitcher(self, noise) -> CausalStitcher | CrossfadeStitcher:
        """A fresh stitcher for one sentence; ``noise`` is its vocoder excitation (None: the model's own)."""
        hift = self.vocoder
        if self.stitcher == "causal":
            return CausalStitcher(
                lambda mel, finalize, first_frame: hift.inference(
                    mel, finalize=finalize, noise=noise, first_frame=first_frame
                )[0],
                hift.config.samples_per_frame,
            )
        if self.stitcher == "crossfade":
            return CrossfadeStitcher(
                lambda mel, cache_source: hift.inference(mel, cache_source=cache_source, noise=noise)
            )
        raise ValueError(f"unknown stitcher {self.stitcher!r}; expected 'causal' or 'crossfade'")

    def prefix(self, speaker, plan: PromptPlan, prompt) -> FlowPrefix | None:
        return self.prefixes.get(self.flow, speaker, plan, prompt)

    def records_new_prefixes(self, plan: PromptPlan) -> bool:
        """Whether a new voice's prefix is recorded by its first chunk (:meth:`Flow.first_chunk_recording_prefix`)
        instead of built before it: every flow off CUDA (torch on the CPU or MPS, MLX). On CUDA the build and the
        first chunk are shared graphs (already a known voice's time plus milliseconds)."""
        return self.device.type != "cuda" and self.prefixes.caches(plan)


def prepare_voice_for_streaming(parts: StreamingParts, speaker) -> None:
    """Build (or keep) the voice's flow prefix now, so its first streamed request starts as fast as later ones
    (on CUDA the prefix's first-chunk graph too: a first chunk of placeholder tokens captures it)."""
    flow = parts.flow
    plan = PromptPlan.for_request(parts, speaker)
    prompt = plan.prompt(speaker, parts.device)
    prefix = parts.prefix(speaker, plan, prompt)
    if prefix is None or parts.device.type != "cuda":  # the first-chunk graphs below are CUDA's (MLX has none)
        return
    graphs = flow.cuda_graphs(prompt[0].device)
    if graphs is not None and graphs.first_chunk_missing(flow, prefix, prompt[0].device):
        placeholder = torch.zeros(1, plan.first_hop + flow.config.pre_lookahead_len, dtype=torch.long)
        flow.inference(placeholder.to(prompt[0].device), *prompt, streaming=True, finalize=False, prefix=prefix)


def stream_segment(
    parts: StreamingParts,
    tokens: Iterable[int],
    speaker,
    noise,
    should_stop: Callable[[], bool],
    first_hop: int = FIRST_HOP_TOKENS,
) -> Iterator[Chunk]:
    """Yield audio chunks of one sentence as its speech tokens arrive from ``tokens``."""
    flow, device = parts.flow, parts.device
    lookahead = flow.config.pre_lookahead_len
    plan = PromptPlan.for_request(parts, speaker, first_hop)
    prompt = plan.prompt(speaker, device)
    stitcher = parts.make_stitcher(noise)
    turns = DeviceTurns(enabled=parts.takes_turns or serialize_device_work(device), settle=parts.settle_llm_step)
    # The LLM stops once the first chunk's tokens exist, until that chunk is made: on CUDA its graphs would
    # queue ahead of every kernel of the voice's prefix and of the first chunk on the one stream; on a CPU
    # the tokens it decodes past them would take cores from a new voice's prefix build (what first audio waits for).
    held = device.type in HOLD_LLM_FOR_FIRST_CHUNK
    hold_after = plan.first_hop + lookahead if held else None
    producer = TokenProducer(tokens, turns, hold_after, parts.decode_thread)
    offset, hops = 0, hop_schedule(plan.first_hop)

    def finite_mel(ids: torch.Tensor, notes: list[str], finalize: bool) -> torch.Tensor:
        """The chunk's mel; a non-finite one is redone once the flow has been widened to float32."""
        nonlocal prefix
        recorded = None
        if prefix is None and not finalize and record_prefix:  # a new voice: its prefix recorded on the way
            mel, recorded = flow.first_chunk_recording_prefix(ids, *prompt, prefix_tokens=plan.prefix_tokens)
        else:
            mel = flow.inference(
                ids, *prompt, streaming=not finalize, finalize=finalize, prefix=None if finalize else prefix
            )
        if not bool(torch.isfinite(mel).all()) and parts.widen_flow(notes):
            # The widening emptied the cache; a prefix recorded above is of the old dtype, so it is built anew.
            prefix = parts.prefix(speaker, plan, prompt)
            mel = flow.inference(
                ids, *prompt, streaming=not finalize, finalize=finalize, prefix=None if finalize else prefix
            )
        elif recorded is not None:
            parts.prefixes.add(flow, speaker, plan, recorded)
            prefix = recorded
        return mel[:, :, 2 * offset :]

    record_prefix = parts.records_new_prefixes(plan)
    try:
        with turns.chunk():  # a known voice's prefix, else (unless the first chunk records it) built now
            if record_prefix:
                prefix = parts.prefixes.cached(flow, speaker, plan, prompt)
            else:
                prefix = parts.prefix(speaker, plan, prompt)  # while the LLM decodes (if it may)
        for this_hop in hops:
            available = producer.wait_for(offset + this_hop + lookahead)
            if should_stop():
                return
            if available >= offset + this_hop + lookahead:
                # On a CPU the LLM and the flow share the cores, on CUDA one stream: the first chunk goes first.
                producer.pause(offset == 0 and device.type in ("cpu", "cuda"))
                notes: list[str] = []
                with turns.chunk():  # the ids' host-to-device copy is device work too
                    ids = torch.tensor([producer.tokens[: offset + this_hop + lookahead]], device=device)
                    audio = stitcher.add(finite_mel(ids, notes, finalize=False).float(), final=False)
                producer.pause(False)
                offset += this_hop
                yield Chunk(audio, offset, is_final=False, notes=notes)
                continue
            if available == 0:
                yield Chunk(np.zeros(0, dtype=np.float32), 0, is_final=True)
                return
            notes = []
            with turns.chunk():
                ids = torch.tensor([producer.tokens[:available]], device=device)
                audio = stitcher.add(finite_mel(ids, notes, finalize=True).float(), final=True)
            yield Chunk(audio, available, is_final=True, notes=notes)
            return
    finally:
        producer.abandon()
