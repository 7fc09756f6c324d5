"""The audio formats the speech API answers in, whole or streamed.

Whole files are encoded with soundfile (libsndfile >= 1.1 writes MP3 and Ogg Opus as well as WAV and
FLAC). Streams are sent as the model makes them: ``pcm`` is raw 16-bit little-endian mono, as OpenAI
sends it; ``wav`` is the same samples behind a header whose sizes say "unknown length" (0xFFFFFFFF),
which players and decoders read as a stream.
"""

from __future__ import annotations

import io
import struct

import numpy as np

# response_format -> (media type, soundfile format, soundfile subtype)
FORMATS = {
    "mp3": ("audio/mpeg", "MP3", "MPEG_LAYER_III"),
    "opus": ("audio/ogg", "OGG", "OPUS"),
    "flac": ("audio/flac", "FLAC", "PCM_16"),
    "wav": ("audio/wav", "WAV", "PCM_16"),
    "pcm": ("audio/pcm", "RAW", "PCM_16"),
}
STREAMABLE = ("pcm", "wav")  # formats whose bytes can be sent before the whole audio exists
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
UNKNOWN_SIZE = 0xFFFFFFFF


def media_type(response_format: str) -> str:
    return FORMATS[response_format][0]


def encode(samples: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    """``samples`` (N,) float in [-1, 1] as a complete file (or raw PCM) of ``response_format``."""
    if response_format == "pcm":
        return pcm16(samples)
    import soundfile

    _, container, subtype = FORMATS[response_format]
    if response_format == "opus" and sample_rate not in OPUS_RATES:
        raise ValueError(f"Opus cannot hold {sample_rate} Hz audio (it takes {', '.join(map(str, OPUS_RATES))})")
    buffer = io.BytesIO()
    soundfile.write(buffer, _clean(samples), sample_rate, format=container, subtype=subtype)
    return buffer.getvalue()


def pcm16(samples: np.ndarray) -> bytes:
    """16-bit little-endian PCM bytes of (N,) float samples."""
    return (_clean(samples) * 32767.0).round().astype("<i2").tobytes()


def streaming_wav_header(sample_rate: int) -> bytes:
    """A mono 16-bit WAV header for a stream of unknown length."""
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", UNKNOWN_SIZE)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", UNKNOWN_SIZE)
    )


def _clean(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(np.asarray(samples, dtype=np.float32).reshape(-1)), -1.0, 1.0)
