"""Streaming synthesis: audio chunks while the LLM is still decoding (spec 8.3).

The LLM runs ahead in a producer thread; the consumer turns each hop of tokens into mel with the
chunk-causal flow (3 tokens of look-ahead) and into audio with the vocoder, stitched so that the
chunks join seamlessly. The hop schedule (25 -> 50 -> 100 tokens) lives in this request only:
upstream keeps it on the model and never resets it, so its later requests start with 100-token hops
(PR #1849).

Chunk borders must fall on the flow's 25-token attention grid, which counts the prompt too. Upstream
lengthens the first hop by the prompt's remainder (up to 24 more tokens to wait for); we instead drop
that remainder from the START of the flow's prompt (under 1 s of the voice sample, never the LLM's
prompt), so the first audio needs only 25 + 3 tokens.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

FIRST_HOP_TOKENS = 25
MAX_HOP_TOKENS = 100
FLOW_CHUNK_TOKENS = 25  # the flow's static chunk (50 mel frames)
V2_MEL_CACHE_FRAMES = 8
V2_SOURCE_CACHE_SAMPLES = 8 * 480


class TokenProducer:
    """Owns the background thread that pulls speech tokens from the LLM as fast as it can."""

    def __init__(self, tokens: Iterable[int]):
        self.tokens: list[int] = []
        self.finished = False
        self.error: BaseException | None = None
        self._abandoned = False
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(iter(tokens),), name="llm-producer", daemon=True)
        self._thread.start()

    def _run(self, tokens: Iterator[int]) -> None:
        try:
            for token in tokens:
                with self._ready:
                    if self._abandoned:
                        return
                    self.tokens.append(token)
                    self._ready.notify_all()
        except BaseException as error:  # handed to the consumer, which raises it in its own thread
            self.error = error
        finally:
            with self._ready:
                self.finished = True
                self._ready.notify_all()

    def wait_for(self, count: int) -> int:
        """Block until ``count`` tokens exist or decoding ended; return how many exist."""
        with self._ready:
            self._ready.wait_for(lambda: len(self.tokens) >= count or self.finished)
            if self.error is not None:
                raise self.error
            return len(self.tokens)

    def abandon(self) -> None:
        with self._ready:
            self._abandoned = True
        self._thread.join(timeout=30)


@dataclass
class Chunk:
    audio: np.ndarray  # (n,) float32 at 24 kHz
    tokens_so_far: int
    is_final: bool


class CausalStitcher:
    """CosyVoice3: the causal vocoder re-runs on all mel so far and emits only the new samples."""

    def __init__(self, vocode: Callable[..., torch.Tensor]):
        self.vocode = vocode
        self.mel: torch.Tensor | None = None
        self.emitted = 0

    def add(self, mel: torch.Tensor, final: bool) -> np.ndarray:
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=2)
        wave = self.vocode(self.mel, finalize=final)[0]
        fresh = wave[self.emitted:]
        self.emitted = wave.shape[0]
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


def _grid_aligned_prompt(speaker, device) -> tuple[tuple[torch.Tensor, ...], int]:
    """The flow prompt cut at its start to whole 25-token chunks, and the first-hop pad still needed."""
    tokens, mel = speaker.speech_tokens, speaker.mel
    excess = tokens.shape[1] % FLOW_CHUNK_TOKENS
    if excess and tokens.shape[1] > FLOW_CHUNK_TOKENS:
        tokens, mel = tokens[:, excess:], mel[:, 2 * excess:]
    pad = math.ceil(tokens.shape[1] / FLOW_CHUNK_TOKENS) * FLOW_CHUNK_TOKENS - tokens.shape[1]
    return (tokens.to(device), mel.to(device), speaker.embedding.to(device)), pad


def stream_segment(model, tokens: Iterable[int], speaker, noise, should_stop: Callable[[], bool]) -> Iterator[Chunk]:
    """Yield audio chunks of one sentence as its speech tokens arrive from ``tokens``."""
    flow, hift = model.networks.flow, model.networks.hift
    device = next(flow.parameters()).device
    lookahead = flow.config.pre_lookahead_len
    prompt, grid_pad = _grid_aligned_prompt(speaker, device)
    if model.version == "cosyvoice3":
        stitcher = CausalStitcher(lambda mel, finalize: hift.inference(mel, finalize=finalize, noise=noise)[0])
    else:
        stitcher = CrossfadeStitcher(lambda mel, cache_source: hift.inference(mel, cache_source=cache_source,
                                                                              noise=noise))
    producer = TokenProducer(tokens)
    offset, hop = 0, FIRST_HOP_TOKENS
    try:
        while True:
            this_hop = hop + grid_pad if offset == 0 else hop
            available = producer.wait_for(offset + this_hop + lookahead)
            if should_stop():
                return
            if available >= offset + this_hop + lookahead:
                ids = torch.tensor([producer.tokens[: offset + this_hop + lookahead]], device=device)
                mel = flow.inference(ids, *prompt, streaming=True, finalize=False)[:, :, 2 * offset:]
                offset += this_hop
                hop = min(MAX_HOP_TOKENS, 2 * hop)
                yield Chunk(stitcher.add(mel.float(), final=False), offset, is_final=False)
                continue
            if available == 0:
                yield Chunk(np.zeros(0, dtype=np.float32), 0, is_final=True)
                return
            ids = torch.tensor([producer.tokens[:available]], device=device)
            mel = flow.inference(ids, *prompt, streaming=False, finalize=True)[:, :, 2 * offset:]
            yield Chunk(stitcher.add(mel.float(), final=True), available, is_final=True)
            return
    finally:
        producer.abandon()
