"""A quick look at an uploaded or recorded prompt before any work is queued: is it audio, how long, how loud.

It runs in the UI process, so it uses soundfile (and audioread for containers libsndfile cannot read)
and numpy only, never torch. The numbers are the worker's own (``cosyvoice_mac.prompt_limits``); the
worker's checks stay the final word, this only saves the user a wait for an answer we can give now.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from cosyvoice_mac.prompt_limits import (
    MAX_FILE_SECONDS,
    MAX_SECONDS,
    MIN_SECONDS,
    MIN_SOURCE_SAMPLE_RATE,
    PLATFORM_DECODER_SUFFIXES,
    SILENT_PEAK,
    TAIL_SECONDS,
    TOKENIZER_SAMPLE_RATE,
    TRIM_FRAME_LENGTH,
    TRIM_HOP_LENGTH,
    TRIM_TOP_DB,
)

TRIM_FRAME_SECONDS = TRIM_FRAME_LENGTH / TOKENIZER_SAMPLE_RATE  # the worker's frames, at any rate
TRIM_HOP_SECONDS = TRIM_HOP_LENGTH / TOKENIZER_SAMPLE_RATE

PROBLEMS = (
    "missing",
    "empty",
    "not_audio",
    "invalid_samples",
    "no_decoder",
    "low_rate",
    "silent",
    "too_short",
    "too_long",
)


@dataclass(frozen=True)
class PromptCheck:
    """What the page says about one prompt file: its length, and the problem that blocks it (if any).

    ``speech_seconds`` is the length after trimming leading and trailing silence, as the worker trims.
    ``problem`` is one of PROBLEMS or None; ``details`` fill the message (name, rate, ...).
    """

    seconds: float | None = None
    speech_seconds: float | None = None
    problem: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problem is None


def inspect_prompt(path: str | Path) -> PromptCheck:
    """Decode ``path`` (at most MAX_FILE_SECONDS of it) and judge it as a voice prompt."""
    path = Path(path)
    name = {"name": path.name}
    try:
        if path.stat().st_size == 0:
            return PromptCheck(problem="empty", details=name)
    except FileNotFoundError:  # e.g. an upload the temporary folder no longer keeps
        return PromptCheck(problem="missing", details=name)
    except OSError:
        return PromptCheck(problem="not_audio", details=name)
    try:
        samples, rate, seconds = _decode(path)
    except _NoDecoder:
        return PromptCheck(problem="no_decoder", details=name)
    except _NotAudio:
        return PromptCheck(problem="not_audio", details=name)
    if rate < MIN_SOURCE_SAMPLE_RATE:
        return PromptCheck(
            seconds=seconds, problem="low_rate", details={**name, "rate": rate, "limit": MIN_SOURCE_SAMPLE_RATE}
        )
    if not np.isfinite(samples).all():  # the worker refuses these too (cosyvoice_mac.audio.decode_audio)
        return PromptCheck(seconds=seconds, problem="invalid_samples", details=name)
    if samples.size == 0 or float(np.max(np.abs(samples))) < SILENT_PEAK:
        return PromptCheck(seconds=seconds, speech_seconds=0.0, problem="silent", details=name)
    speech = speech_seconds(samples, rate) if seconds <= MAX_FILE_SECONDS else seconds
    details = {**name, "seconds": seconds, "speech": speech}
    if speech + TAIL_SECONDS > MAX_SECONDS:
        return PromptCheck(seconds, speech, "too_long", {**details, "limit": MAX_SECONDS - TAIL_SECONDS})
    if speech < MIN_SECONDS:
        return PromptCheck(seconds, speech, "too_short", {**details, "limit": MIN_SECONDS})
    return PromptCheck(seconds, speech, None, details)


def speech_seconds(samples: np.ndarray, rate: int) -> float:
    """Seconds between the first and last frame within TRIM_TOP_DB of the loudest frame (RMS)."""
    frame = max(1, round(TRIM_FRAME_SECONDS * rate))
    hop = max(1, round(TRIM_HOP_SECONDS * rate))
    if samples.size <= frame:
        return samples.size / rate
    starts = np.arange(0, samples.size - frame + 1, hop)
    squares = np.concatenate([[0.0], np.cumsum(samples.astype(np.float64) ** 2)])  # cpu-only: numpy
    rms = np.sqrt(np.maximum((squares[starts + frame] - squares[starts]) / frame, 0.0))
    loud = np.nonzero(rms >= rms.max() * 10 ** (-TRIM_TOP_DB / 20))[0]
    return float(starts[loud[-1]] + frame - starts[loud[0]]) / rate


class _NotAudio(Exception):
    pass


class _NoDecoder(Exception):
    pass


def _decode(path: Path) -> tuple[np.ndarray, int, float]:
    """(mono float32 samples, sample rate, full duration in seconds)."""
    try:
        info = soundfile.info(str(path))
    except (soundfile.LibsndfileError, RuntimeError, OSError, TypeError):
        return _decode_with_platform_decoder(path)
    if info.samplerate <= 0 or info.frames <= 0:
        raise _NotAudio
    seconds = info.frames / info.samplerate
    frames = min(info.frames, int(MAX_FILE_SECONDS * info.samplerate))
    try:
        samples, rate = soundfile.read(str(path), frames=frames, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        raise _NotAudio from error
    return samples.mean(axis=1), rate, seconds


def _decode_with_platform_decoder(path: Path) -> tuple[np.ndarray, int, float]:
    if path.suffix.lower() not in PLATFORM_DECODER_SUFFIXES:
        raise _NotAudio
    try:
        import audioread
    except ImportError as error:
        raise _NoDecoder from error
    try:
        with audioread.audio_open(str(path)) as reader:
            rate, channels, seconds = reader.samplerate, max(1, reader.channels), float(reader.duration)
            limit = int(MAX_FILE_SECONDS * rate * channels)
            chunks, count = [], 0
            for buffer in reader:
                chunk = np.frombuffer(buffer, dtype="<i2")
                chunks.append(chunk)
                count += chunk.size
                if count >= limit:
                    break
    except audioread.NoBackendError as error:
        raise _NoDecoder from error
    except (audioread.DecodeError, OSError, EOFError) as error:
        raise _NotAudio from error
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, "<i2")
    pcm = pcm[: pcm.size - pcm.size % channels].reshape(-1, channels)
    return (pcm.astype(np.float32) / 32768.0).mean(axis=1), rate, seconds


@functools.lru_cache(maxsize=64)
def _checked(path: str, size: int, modified_ns: int) -> PromptCheck:
    return inspect_prompt(path)


def checked_prompt(path: str | Path) -> PromptCheck:
    """``inspect_prompt``, remembered per file version: the upload's check answers Generate and Save too, so
    the page decodes each prompt once (Gradio gives every upload its own path)."""
    try:
        stat = os.stat(path)
    except OSError:
        return inspect_prompt(path)  # it explains the missing file
    return _checked(str(path), stat.st_size, stat.st_mtime_ns)
