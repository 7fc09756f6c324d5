"""Float samples as 16-bit PCM and WAV bytes, written once for every output: the worker's saved files,
long-form lines, the API's streamed and whole answers, the page's streaming player and the CLI's copies.

A sample ``x`` in [-1, 1] is stored as ``round(x * 32767)`` (NaN as 0, anything outside clipped), which
reads back through soundfile within 1/32768 of ``x``. Files are mono, little-endian, 44-byte headers
(RIFF, ``fmt `` of 16 bytes, ``data``) with an optional LIST/INFO chunk before the data.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

PCM16_SCALE = 32767.0
UNKNOWN_SIZE = 0xFFFFFFFF  # a streamed WAV's sizes: players and decoders read it as "until the end"
HEADER_BYTES = 44  # RIFF + fmt (16 bytes) + data, without a LIST chunk


def clean(samples) -> np.ndarray:
    """``samples`` as (N,) float32 that any encoder can take: NaN made 0, clipped to [-1, 1]."""
    return np.clip(np.nan_to_num(np.asarray(samples, dtype=np.float32).reshape(-1)), -1.0, 1.0)


def pcm16(samples) -> bytes:
    """16-bit little-endian PCM bytes of (N,) float samples in [-1, 1]."""
    return (clean(samples) * PCM16_SCALE).round().astype("<i2").tobytes()


def wav_bytes(samples, sample_rate: int, info: dict[str, str] | None = None) -> bytes:
    """A mono 16-bit PCM WAV file of ``samples`` (N,) float in [-1, 1], with a LIST/INFO chunk when ``info``
    maps four-letter INFO ids (INAM, ICMT, ISFT, ICRD, ...) to text (stored UTF-8)."""
    return wav_from_pcm16(pcm16(samples), sample_rate, info)


def wav_from_pcm16(pcm: bytes, sample_rate: int, info: dict[str, str] | None = None) -> bytes:
    """A mono 16-bit WAV file around ``pcm`` (little-endian samples; a stray odd byte is dropped)."""
    pcm = pcm[: len(pcm) - len(pcm) % 2]
    chunks = [_chunk(b"fmt ", _format(sample_rate))]
    if info:
        body = b"INFO" + b"".join(
            _chunk(key.encode("ascii"), value.encode("utf-8") + b"\0") for key, value in info.items()
        )
        chunks.append(_chunk(b"LIST", body))
    chunks.append(_chunk(b"data", pcm))
    payload = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def streaming_wav_header(sample_rate: int) -> bytes:
    """A mono 16-bit WAV header for a stream of unknown length (both sizes UNKNOWN_SIZE); PCM follows."""
    fmt = _format(sample_rate)
    unknown = struct.pack("<I", UNKNOWN_SIZE)
    return b"RIFF" + unknown + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + unknown


def write_wav(path: str | Path, samples, sample_rate: int) -> Path:
    """Write mono audio ``(N,)`` or ``(1, N)`` (numpy, or anything numpy reads) to ``path`` as ``wav_bytes``,
    with the one atomic write (``paths.atomic_write``): the take check's kept takes, as the model made them."""
    from cosyvoice_mac.paths import atomic_write

    path = Path(path)
    samples = np.asarray(samples)
    if samples.ndim == 2 and samples.shape[0] == 1:
        samples = samples[0]
    if samples.ndim != 1:
        raise ValueError(f"write_wav takes mono audio (N,) or (1, N), got shape {samples.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, wav_bytes(samples, sample_rate))
    return path


def read_samples(path: str | Path) -> np.ndarray:
    """The (N,) float32 samples of a WAV written here: its int16 values over PCM16_SCALE, which encode to
    exactly the saved bytes again (soundfile's own float read divides by 32768, which would not)."""
    import soundfile

    pcm = soundfile.read(str(path), dtype="int16")[0]
    return (pcm.astype(np.float32) / PCM16_SCALE).reshape(-1)


def read_wav_info(path: str | Path) -> dict[str, str]:
    """The LIST/INFO entries of a WAV file (empty when it has none)."""
    data = Path(path).read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"{path} is not a WAV file")
    info: dict[str, str] = {}
    offset = 12
    while offset + 8 <= len(data):
        chunk_id, size = data[offset : offset + 4], struct.unpack("<I", data[offset + 4 : offset + 8])[0]
        body = data[offset + 8 : offset + 8 + size]
        if chunk_id == b"LIST" and body[:4] == b"INFO":
            inner = 4
            while inner + 8 <= len(body):
                key, length = body[inner : inner + 4], struct.unpack("<I", body[inner + 4 : inner + 8])[0]
                info[key.decode("ascii")] = body[inner + 8 : inner + 8 + length].rstrip(b"\0").decode("utf-8")
                inner += 8 + length + (length % 2)
        offset += 8 + size + (size % 2)
    return info


def _format(sample_rate: int) -> bytes:
    """The ``fmt `` chunk's body: PCM, one channel, 16 bits."""
    return struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)


def _chunk(chunk_id: bytes, body: bytes) -> bytes:
    if len(chunk_id) != 4:
        raise ValueError(f"RIFF chunk id {chunk_id!r} must have four characters")
    return chunk_id + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")
