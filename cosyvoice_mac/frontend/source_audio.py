"""A recording to convert (voice conversion), decoded once and cut into pieces the speech tokenizer can take.

The recording is read by the one reader (``sound.read``), its channels averaged and resampled to 16 kHz with
the project's resampler, exactly as a prompt is (``prompt_audio``), but neither trimmed nor normalised: its
timing is what conversion keeps. The speech detector (``vad``) says whether it holds speech at all and where
its pauses are; a recording longer than the tokenizer's 30 s window is cut in the middle of pauses (or, in
speech with no pause, at the quietest 20 ms), every cut on the 640-sample grid of the 25 Hz speech tokens, so
each piece is a whole number of tokens long and the pieces' outputs add up to the source's length.

Content hash: ``prompt_audio.audio_content_hash`` of the 16 kHz samples (equal PCM in any container hashes
the same); it is the sidecar's ``source_hash``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cosyvoice_mac.conversion_request import Recording
from cosyvoice_mac.frontend.prompt_audio import audio_content_hash
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.frontend.speech_tokenizer import MAX_PROMPT_SECONDS
from cosyvoice_mac.frontend.vad import too_little_speech
from cosyvoice_mac.sound.limits import TOKENIZER_SAMPLE_RATE
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.read import read_audio
from cosyvoice_mac.sound.source_check import judge_source

TOKEN_SAMPLES = 640  # 16 kHz samples per 25 Hz speech token
MAX_PIECE_SAMPLES = int(MAX_PROMPT_SECONDS * TOKENIZER_SAMPLE_RATE)  # the tokenizer's window
MIN_PIECE_SAMPLES = 2 * TOKENIZER_SAMPLE_RATE  # a pause closer than 2 s to the last cut makes too short a piece
HARD_CUT_SEARCH_SAMPLES = 5 * TOKENIZER_SAMPLE_RATE  # speech with no pause: the quietest spot in its last 5 s
QUIET_FRAME_SAMPLES = 320  # 20 ms


@dataclass(frozen=True)
class SourcePiece:
    """One piece of the source, ``[start, end)`` in 16 kHz samples (a whole number of tokens but the last)."""

    start: int
    end: int

    @property
    def samples(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class DecodedSource:
    """The recording at 16 kHz (``wave_16k`` (1, N) float32 mono), its hash, and the pieces that cover it."""

    wave_16k: torch.Tensor
    content_hash: str
    name: str
    source_rate: int
    pieces: tuple[SourcePiece, ...]

    @property
    def seconds(self) -> float:
        return self.wave_16k.shape[1] / TOKENIZER_SAMPLE_RATE

    def piece_wave(self, piece: SourcePiece) -> torch.Tensor:
        """(1, piece.samples) of the 16 kHz source."""
        return self.wave_16k[:, piece.start : piece.end]


def decode_source(source: Recording | DecodedSource, detector=None) -> DecodedSource:
    """Decode ``source`` and plan its pieces; AudioInputError (``sound.problems``) when it cannot be converted.

    ``detector`` is a ``vad.SpeechDetector`` (None: the process's shared one). A recording in which it hears
    less than ``MIN_CONVERT_SPEECH_SECONDS`` of speech (silence, noise, music) is refused with ``no_speech``.
    """
    if isinstance(source, DecodedSource):
        return source
    if source.audio is not None:
        samples, rate = read_audio(source.audio)
    else:
        samples, rate = np.asarray(source.samples, dtype=np.float32), int(source.sample_rate)
        if not np.isfinite(samples).all():
            raise AudioInputError("invalid_samples", name=source.name)
    check = judge_source(samples, rate, source.name)
    if not check.ok:
        raise AudioInputError(check.problem, **check.details)
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    wave = resample(torch.from_numpy(np.ascontiguousarray(mono, dtype=np.float32))[None], rate, TOKENIZER_SAMPLE_RATE)
    if detector is None:
        from cosyvoice_mac.frontend.vad import shared_detector

        detector = shared_detector()
    segments = detector.segments(wave[0].numpy(), TOKENIZER_SAMPLE_RATE)
    if too_little_speech(segments):  # the voice prompts' rule too (engine.voice_library.judge_voice_audio)
        raise AudioInputError("no_speech", name=source.name)
    pauses = [
        round((before.end_s + after.start_s) / 2 * TOKENIZER_SAMPLE_RATE)
        for before, after in zip(segments, segments[1:])
    ]
    pieces = plan_pieces(wave[0].numpy(), pauses)
    return DecodedSource(wave.contiguous(), audio_content_hash(wave), source.name, rate, tuple(pieces))


def plan_pieces(wave_16k: np.ndarray, pauses: list[int], max_samples: int = MAX_PIECE_SAMPLES) -> list[SourcePiece]:
    """Contiguous pieces covering ``wave_16k`` (N,), none longer than ``max_samples``: each cut at the latest
    pause (a 16 kHz sample index) that fits, else at the quietest 20 ms before the limit; cuts on the token grid."""
    total, start, pieces = len(wave_16k), 0, []
    while total - start > max_samples:
        limit = start + max_samples
        fitting = [pause for pause in pauses if start + MIN_PIECE_SAMPLES <= pause <= limit]
        cut = (
            fitting[-1]
            if fitting
            else _quietest(wave_16k, max(start + MIN_PIECE_SAMPLES, limit - HARD_CUT_SEARCH_SAMPLES), limit)
        )
        cut = start + max(1, (cut - start) // TOKEN_SAMPLES) * TOKEN_SAMPLES
        pieces.append(SourcePiece(start, cut))
        start = cut
    pieces.append(SourcePiece(start, total))
    return pieces


def _quietest(wave: np.ndarray, begin: int, end: int) -> int:
    """The middle of the quietest 20 ms frame of ``wave[begin:end]``."""
    frames = (end - begin) // QUIET_FRAME_SAMPLES
    if frames < 1:
        return end
    energy = np.square(wave[begin : begin + frames * QUIET_FRAME_SAMPLES]).reshape(frames, -1).mean(axis=1)
    return begin + int(np.argmin(energy)) * QUIET_FRAME_SAMPLES + QUIET_FRAME_SAMPLES // 2
