"""Voice conversion with the preview voice: the source itself is the "base voice" that WORLD moves toward the
target, so it runs offline, before any model is downloaded, and every interface can be tried for real.

source -> the same 16 kHz pieces as CosyVoice's conversion (``frontend.source_audio``) -> WORLD analysis of each
piece -> the source's own statistics (pitch level and range, band envelope statistics at every formant warp,
``world_convert.BaseVoiceModel``) measured over its first pieces until ``STATS_VOICED_SECONDS`` of voicing
-> each piece's log-F0 and band powers mapped onto the target's, warped by the best-fitting formant warp,
resynthesised at 24 kHz, kept at the source piece's loudness, fitted to its length and faded at the joins
exactly as ``pipeline.convert`` does. An approximate match: the timbre moves, the words, timing and
intonation are the source's; the result's notes say so.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np

from cosyvoice_mac.conversion_request import VOICE_CONVERSION, ConversionRequest
from cosyvoice_mac.frontend.source_audio import DecodedSource
from cosyvoice_mac.pipeline.convert import fade_edges, fit_length, output_samples, piece_label
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SynthesisError, SynthesisResult
from cosyvoice_mac.preview import world_convert
from cosyvoice_mac.preview.labels import PREVIEW_NOTE
from cosyvoice_mac.sound.limits import TOKENIZER_SAMPLE_RATE

STATS_VOICED_SECONDS = 10.0  # enough voicing for stable statistics; the first piece usually has it
MAX_PEAK = 0.95
LEVEL_FRAME = 480  # 20 ms at 24 kHz


def convert_source(
    request: ConversionRequest,
    target: world_convert.VoiceStats,
    source: DecodedSource,
    should_stop: Callable[[], bool],
) -> Iterator[SynthesisResult]:
    """Re-speak each piece of ``source`` with the WORLD statistics of ``target``; one result per piece."""
    count, analysed = len(source.pieces), {}

    def frames_of(index: int) -> world_convert.WorldFrames:
        if index not in analysed:
            wave = source.piece_wave(source.pieces[index])[0].numpy()
            analysed[index] = world_convert.analyse(wave, TOKENIZER_SAMPLE_RATE)
        return analysed[index]

    started = time.perf_counter()
    voice = _source_voice(frames_of, count)
    alpha = voice.estimate_warp(target)
    timings = {"analysis": time.perf_counter() - started}
    for index, piece in enumerate(source.pieces):
        if should_stop():
            return
        clock = time.perf_counter()
        frames = _stretched(frames_of(index), request.speed)
        analysed.pop(index, None)  # a long source keeps only the pieces its statistics still need
        wave = voice.convert(frames, target, alpha)
        original = source.piece_wave(piece)[0].numpy()
        wave = _level_like(wave, original)
        edges = (index > 0, index < count - 1)
        timings["convert"] = time.perf_counter() - clock
        yield SynthesisResult(
            audio=fade_edges(fit_length(wave, output_samples(piece, request.speed)), *edges),
            sample_rate=SAMPLE_RATE,
            speech_token_count=0,
            seconds=time.perf_counter() - clock + timings.get("analysis", 0.0),
            text=piece_label(piece),
            segment_index=index,
            segment_count=count,
            seed=0,
            mode=VOICE_CONVERSION,
            timings=timings,
            notes=[PREVIEW_NOTE],
        )
        timings = {}


def _source_voice(frames_of, count: int) -> world_convert.BaseVoiceModel:
    """The source's statistics over its first pieces until STATS_VOICED_SECONDS of voicing (or all of them)."""
    taken, voiced = [], 0.0
    for index in range(count):
        frames = frames_of(index)
        taken.append(frames)
        voiced += float((frames.f0 > 0).sum()) * world_convert.FRAME_PERIOD_MS / 1000
        if voiced >= STATS_VOICED_SECONDS:
            break
    joined = world_convert.WorldFrames(*(np.concatenate(values) for values in zip(*(_fields(f) for f in taken))))
    try:
        return world_convert.BaseVoiceModel.measure(joined, TOKENIZER_SAMPLE_RATE)
    except world_convert.ConversionError as error:
        raise SynthesisError(
            f"the recording to convert has no voiced speech the preview voice can follow ({error}); "
            "pick a recording of someone speaking"
        ) from error


def _fields(frames: world_convert.WorldFrames) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return frames.f0, frames.envelope, frames.aperiodicity


def _stretched(frames: world_convert.WorldFrames, speed: float) -> world_convert.WorldFrames:
    """``frames`` played ``speed`` times faster (nearest frames on a resampled time line; pitch unchanged)."""
    if speed == 1.0:
        return frames
    count = len(frames.f0)
    picks = np.minimum(count - 1, np.round(np.arange(max(1, round(count / speed))) * speed).astype(int))
    return world_convert.WorldFrames(*(values[picks] for values in _fields(frames)))


def _level_like(wave: np.ndarray, original: np.ndarray) -> np.ndarray:
    """``wave`` scaled to the loudness of the source piece ``original`` (16 kHz), its peak under MAX_PEAK."""
    loud, reference = _speech_level(wave), _speech_level(original)
    peak = float(np.abs(wave).max()) if len(wave) else 0.0
    if loud <= 0.0 or peak <= 0.0:
        return wave
    return (wave * min(reference / loud, MAX_PEAK / peak)).astype(np.float32)


def _speech_level(wave: np.ndarray) -> float:
    """RMS over the louder half of 20 ms frames: the level of the speech, not of the pauses."""
    frames = wave[: len(wave) // LEVEL_FRAME * LEVEL_FRAME].reshape(-1, LEVEL_FRAME)
    if not frames.size:
        return 0.0
    energy = np.sqrt(np.mean(frames**2, axis=1))
    return float(np.sqrt(np.mean(np.square(energy[energy >= np.median(energy)]))))
