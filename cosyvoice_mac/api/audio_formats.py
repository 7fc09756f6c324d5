"""The audio formats the speech API answers in, whole or streamed.

Whole WAV files are ``sound.wav``'s, the same bytes the worker saves; the other containers are encoded
with soundfile (libsndfile >= 1.1 writes MP3 and Ogg Opus as well as FLAC). Streams are sent as the model
makes them: ``pcm`` is raw 16-bit little-endian mono, as OpenAI sends it; ``wav`` is the same samples
behind a header whose sizes say "unknown length" (``sound.wav.streaming_wav_header``), which players and
decoders read as a stream.

A whole WAV, FLAC or MP3 answer carries content credentials (``provenance``) when its facts are given: the
saved WAV has them already, and an answer encoded here is signed with the saved file's facts. Opus and raw
PCM cannot carry them (C2PA has no place in those containers), nor can a stream, whose end is not known
when its first bytes leave.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np

from cosyvoice_mac.provenance import MEDIA_TYPES, with_credentials
from cosyvoice_mac.sound.wav import clean, pcm16, wav_bytes

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


def media_type(response_format: str) -> str:
    return FORMATS[response_format][0]


def encode(samples: np.ndarray, sample_rate: int, response_format: str, credentials: Mapping | None = None) -> bytes:
    """``samples`` (N,) float in [-1, 1] as a complete file (or raw PCM) of ``response_format``, with content
    credentials saying what ``credentials`` (a sidecar's facts) records, where given and the format holds them."""
    encoded = _encode(samples, sample_rate, response_format)
    if credentials is None or response_format not in MEDIA_TYPES:
        return encoded
    title = f"{credentials.get('file') or 'speech'}".rsplit(".", 1)[0] + f".{response_format}"
    return with_credentials(encoded, MEDIA_TYPES[response_format], credentials, title)[0]


def _encode(samples: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    if response_format == "pcm":
        return pcm16(samples)
    if response_format == "wav":
        return wav_bytes(samples, sample_rate)
    import soundfile

    _, container, subtype = FORMATS[response_format]
    if response_format == "opus" and sample_rate not in OPUS_RATES:
        raise ValueError(f"Opus cannot hold {sample_rate} Hz audio (it takes {', '.join(map(str, OPUS_RATES))})")
    # 16-bit PCM is handed over as our own int16 values: libsndfile would scale floats by 32768, not 32767
    data = np.frombuffer(pcm16(samples), "<i2") if subtype == "PCM_16" else clean(samples)
    buffer = io.BytesIO()
    soundfile.write(buffer, data, sample_rate, format=container, subtype=subtype)
    return buffer.getvalue()
