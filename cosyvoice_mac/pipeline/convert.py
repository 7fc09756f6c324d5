"""Voice conversion on CosyVoice (upstream's ``inference_vc``): a recording's own speech tokens, then the flow
and the vocoder exactly as text-to-speech runs them after the LLM, with the target voice's prompt tokens,
mel and speaker vector. The LLM never runs: the words and timing are the source's.

source -> 16 kHz -> pieces of at most 30 s cut at pauses (``frontend.source_audio``) -> per piece: speech
tokens through the prompts' own tokenizer path (``PromptEncoder.speech_tokens``; in the low-memory mode the
tokenizer is loaded once for all pieces, not once per piece) -> ``CosyVoice``'s
token-to-wave step (non-streaming: ``_tokens_to_wave``; streaming: ``streaming.stream_segment``, the same
hops, device turns, prefix cache and float32 redo) -> 24 kHz audio. Each piece's audio is fitted to the
piece's own length (the tokenizer gives N // 640 tokens, so the fit moves at most one token's 40 ms), so
the output never drifts from the source; at every join both sides fade over 10 ms of the pause they were
cut in, so no join clicks. One result per piece (per chunk when streaming): the engine reports progress.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np
import torch

from cosyvoice_mac.conversion_request import VOICE_CONVERSION, ConversionRequest
from cosyvoice_mac.device import between_sentences
from cosyvoice_mac.frontend.source_audio import DecodedSource, SourcePiece
from cosyvoice_mac.pipeline import streaming
from cosyvoice_mac.pipeline.engines import release_engine_memory
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SpeakerPrompt, SynthesisResult
from cosyvoice_mac.sound.limits import TOKENIZER_SAMPLE_RATE

FADE_SAMPLES = SAMPLE_RATE // 100  # 10 ms at each join, inside the pause the cut was made in


def output_samples(piece: SourcePiece, speed: float) -> int:
    """How long a piece's converted audio is at 24 kHz: the piece's own duration, stretched by ``speed``."""
    return round(piece.samples * SAMPLE_RATE / TOKENIZER_SAMPLE_RATE / speed)


def fit_length(wave: np.ndarray, samples: int) -> np.ndarray:
    """``wave`` cut or zero-padded at its end to ``samples`` (at most a token's 960 samples either way)."""
    if len(wave) >= samples:
        return wave[:samples]
    return np.concatenate([wave, np.zeros(samples - len(wave), dtype=wave.dtype)])


def fade_edges(wave: np.ndarray, fade_in: bool, fade_out: bool) -> np.ndarray:
    """``wave`` with a raised-cosine fade from 0 at its start and/or to 0 at its end (a copy when changed)."""
    if not (fade_in or fade_out) or not len(wave):
        return wave
    wave = wave.copy()
    length = min(FADE_SAMPLES, len(wave))
    ramp = (0.5 - 0.5 * np.cos(np.pi * np.arange(length) / length)).astype(wave.dtype)  # 0 ... nearly 1
    if fade_in:
        wave[:length] *= ramp
    if fade_out:
        wave[len(wave) - length :] *= ramp[::-1]
    return wave


def piece_label(piece: SourcePiece) -> str:
    """What a piece's progress says: where it lies in the source."""
    rate = TOKENIZER_SAMPLE_RATE
    return f"{piece.start / rate:.1f}-{piece.end / rate:.1f} s"


def convert_source(
    model, request: ConversionRequest, speaker: SpeakerPrompt, source: DecodedSource, should_stop: Callable[[], bool]
) -> Iterator[SynthesisResult]:
    """Re-speak every piece of ``source`` in ``speaker``'s voice on ``model`` (a ``CosyVoice``)."""
    count = len(source.pieces)
    for index, (piece, (tokens, tokenizer_s)) in enumerate(
        zip(source.pieces, piece_tokens(model, source, should_stop))
    ):
        if should_stop():
            return
        started = time.perf_counter() - tokenizer_s
        timings = {"tokenizer": tokenizer_s}
        wanted = output_samples(piece, request.speed)
        edges = (index > 0, index < count - 1)  # fade in after a join, fade out before one
        noise = model._noise(request.seed, index)
        if request.stream:
            yield from _stream_piece(
                model, tokens, speaker, noise, should_stop, wanted, edges, started, index, count, piece, timings
            )
        else:
            notes: list[str] = []
            wave = model._tokens_to_wave(tokens, speaker, request.speed, timings, noise, notes)
            yield SynthesisResult(
                audio=fade_edges(fit_length(wave, wanted), *edges),
                sample_rate=SAMPLE_RATE,
                speech_token_count=len(tokens),
                seconds=time.perf_counter() - started,
                text=piece_label(piece),
                segment_index=index,
                segment_count=count,
                seed=request.seed,
                mode=VOICE_CONVERSION,
                timings=timings,
                notes=notes,
            )
        between_sentences(model.device)  # MPS: its cached blocks back between pieces, as between sentences
        release_engine_memory(model)  # MLX: its buffer cache likewise


def piece_tokens(model, source: DecodedSource, should_stop: Callable[[], bool]) -> Iterator[tuple[list[int], float]]:
    """Each piece's speech tokens and the seconds they took, through the prompts' own tokenizer path. In the
    low-memory mode (the tokenizer is loaded per call) every piece is tokenised first under one load, released
    before the flow runs; else piece by piece, as each is converted (the first audio comes sooner)."""
    encoder = model.prompt_encoder

    def tokens_of(piece: SourcePiece) -> tuple[list[int], float]:
        started = time.perf_counter()
        return encoder.speech_tokens(source.piece_wave(piece))[0].tolist(), time.perf_counter() - started

    if encoder.tokenizer_stays_loaded:
        yield from map(tokens_of, source.pieces)
        return
    made = []
    with encoder.tokenizer_held():
        for piece in source.pieces:
            if should_stop():
                break
            made.append(tokens_of(piece))
    yield from made


@torch.inference_mode()
def _stream_piece(model, tokens, speaker, noise, should_stop, wanted, edges, started, index, count, piece, timings):
    """One piece streamed: its tokens are all known, so the chunks follow each other as fast as the flow runs;
    the first is faded in and the last fitted and faded out as a whole piece would be."""
    emitted, first = 0, True
    parts = model.streaming_parts()
    for chunk in streaming.stream_segment(parts, tokens, speaker, noise, should_stop, streaming.FIRST_HOP_TOKENS):
        audio = chunk.audio
        if chunk.is_final:
            audio = fit_length(audio, max(0, wanted - emitted))
        audio = fade_edges(audio, edges[0] and first, edges[1] and chunk.is_final)
        emitted, first = emitted + len(audio), False
        yield SynthesisResult(
            audio=audio,
            sample_rate=SAMPLE_RATE,
            speech_token_count=chunk.tokens_so_far,
            seconds=time.perf_counter() - started,
            text=piece_label(piece),
            segment_index=index,
            segment_count=count,
            is_final_chunk=chunk.is_final,
            seed=0,
            mode=VOICE_CONVERSION,
            timings={**timings, "first_chunk": time.perf_counter() - started},
            notes=chunk.notes,
        )
        timings, started = {}, time.perf_counter()
