"""The one reader of recording files, torch-free: the page's quick check, the worker's prompt loading and
the transcriber all decode a file here, so they agree on what a file holds and on what is wrong with it.

soundfile (libsndfile) reads WAV, FLAC, OGG/Vorbis/Opus and MP3; anything it cannot read goes to
audioread, which uses the platform's decoder (Core Audio on macOS, ffmpeg or GStreamer elsewhere) for
M4A/AAC. Files longer than MAX_FILE_SECONDS are refused before decoding, to bound memory.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import soundfile

from cosyvoice_mac.sound.limits import (
    MAX_FILE_SECONDS,
    MAX_RESAMPLE_FILTER_TAPS,
    MAX_SECONDS,
    MIN_SOURCE_SAMPLE_RATE,
    PLATFORM_DECODER_SUFFIXES,
    TAIL_SECONDS,
)
from cosyvoice_mac.sound.problems import AudioInputError


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """``(samples (N, C) float32 in [-1, 1], the file's sample rate)``; AudioInputError naming the problem
    (missing, unreadable, empty, not_audio, no_decoder, too_long, no_samples, invalid_samples)."""
    path = Path(path)
    _check_readable(path)
    try:
        samples, rate = _read_with_soundfile(path)
    except AudioInputError:
        raise
    except Exception as soundfile_error:  # libsndfile raises several types on damaged or foreign data
        samples, rate = _read_with_platform_decoder(path, soundfile_error)
    if samples.shape[0] == 0:
        raise AudioInputError("no_samples", name=path.name)
    if not np.isfinite(samples).all():
        raise AudioInputError("invalid_samples", name=path.name)
    return samples, rate


def check_source_rate(name: str, rate: int, target_rate: int) -> None:
    """AudioInputError unless a recording at ``rate`` Hz can be a prompt read at ``target_rate`` Hz: at least
    MIN_SOURCE_SAMPLE_RATE, and a rate the exact resampler converts with a filter bank of sane size."""
    if rate < MIN_SOURCE_SAMPLE_RATE:
        raise AudioInputError("low_rate", name=name, rate=rate, limit=MIN_SOURCE_SAMPLE_RATE)
    check_resampleable(name, rate, target_rate)


def check_resampleable(name: str, rate: int, target_rate: int) -> None:
    """The exact resampler's filter bank grows with (rate / gcd) x (target / gcd): standard rates keep it tiny,
    while 44101 Hz would need gigabytes, so past MAX_RESAMPLE_FILTER_TAPS a re-export is asked for."""
    divisor = math.gcd(rate, target_rate)
    if (rate // divisor) * (target_rate // divisor) > MAX_RESAMPLE_FILTER_TAPS:
        raise AudioInputError("odd_rate", name=name, rate=rate, target=target_rate)


def _check_readable(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            first_byte = handle.read(1)
    except FileNotFoundError:
        raise AudioInputError("missing", name=path.name) from None
    except IsADirectoryError:
        raise AudioInputError("unreadable", name=path.name, why="it is a folder") from None
    except OSError as error:
        raise AudioInputError("unreadable", name=path.name, why=error.strerror or str(error)) from error
    if not first_byte:
        raise AudioInputError("empty", name=path.name)


def _read_with_soundfile(path: Path) -> tuple[np.ndarray, int]:
    with soundfile.SoundFile(str(path)) as audio_file:
        rate = audio_file.samplerate
        if audio_file.frames > MAX_FILE_SECONDS * rate:
            raise _file_too_long(path, audio_file.frames / rate)
        return audio_file.read(dtype="float32", always_2d=True), rate  # (N, C)


def _read_with_platform_decoder(path: Path, soundfile_error: Exception) -> tuple[np.ndarray, int]:
    """audioread yields 16-bit little-endian interleaved PCM from whichever decoder this machine has."""
    import audioread

    platform_decoders = [b for b in audioread.available_backends() if b.__name__ != "RawAudioFile"]
    if path.suffix.lower() in PLATFORM_DECODER_SUFFIXES and not platform_decoders:
        raise AudioInputError("no_decoder", name=path.name, suffix=path.suffix) from soundfile_error
    try:
        with audioread.audio_open(str(path)) as audio_file:
            rate, channels = int(audio_file.samplerate), int(audio_file.channels)
            if audio_file.duration > MAX_FILE_SECONDS:
                raise _file_too_long(path, audio_file.duration)
            pcm = b"".join(audio_file)
    except AudioInputError:
        raise
    except Exception as error:
        raise AudioInputError("not_audio", name=path.name) from error
    if channels < 1 or rate < 1:
        raise AudioInputError("not_audio", name=path.name)
    usable = len(pcm) - len(pcm) % (2 * channels)
    samples = np.frombuffer(pcm[:usable], dtype="<i2").astype(np.float32) / 32768.0
    return samples.reshape(-1, channels), rate


def _file_too_long(path: Path, seconds: float) -> AudioInputError:
    """A file too long to decode is judged by its length: all of it counts as speech."""
    return AudioInputError(
        "too_long", name=path.name, seconds=seconds, speech=seconds, limit=MAX_SECONDS - TAIL_SECONDS
    )
