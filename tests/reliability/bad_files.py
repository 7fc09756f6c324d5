"""The bad recordings every door is offered (the bad-input matrix and ``bench/campaign.py``), made from one good
recording: text, an empty file, NaN and infinite samples, 8 kHz, silence, too short, too long, a header with no
samples, random bytes, a picture, one frame, a header whose sample rate is 0."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import soundfile


def _write(folder: Path, name: str, samples=None, rate=24000, raw: bytes | None = None, subtype="PCM_16") -> str:
    path = folder / name
    if raw is not None:
        path.write_bytes(raw)
    else:
        soundfile.write(path, samples, rate, subtype=subtype)
    return str(path)


def write_bad_files(folder: Path, speech: str) -> dict[str, str]:
    """Each bad recording's path by its key ("speech" is the good one itself), written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    voice, rate = soundfile.read(speech, dtype="float32")
    nan, inf = voice.copy(), voice.copy()
    nan[rate : rate + 20], inf[rate : rate + 20] = np.nan, np.inf
    long_voice = np.tile(voice, 11)[: rate * 40]
    header_only = Path(speech).read_bytes()[:44]
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(2000)
    return {
        "speech": speech,
        "text_as_wav": _write(folder, "notes.wav", raw=b"just some text, not audio\n" * 50),
        "zero_bytes": _write(folder, "empty.wav", raw=b""),
        "nan": _write(folder, "nan.wav", nan, rate, subtype="FLOAT"),
        "inf": _write(folder, "inf.wav", inf, rate, subtype="FLOAT"),
        "8khz": _write(folder, "phone.wav", voice[::3], 8000),
        "silent": _write(folder, "silent.wav", np.zeros(rate * 4, np.float32), rate),
        "half_second": _write(folder, "short.wav", voice[: rate // 2], rate),
        "forty_seconds": _write(folder, "long.wav", long_voice, rate),
        "header_only": _write(folder, "cut.wav", raw=header_only),
        "random_mp3": _write(folder, "noise.mp3", raw=os.urandom(4096)),
        "png_as_wav": _write(folder, "picture.wav", raw=png),
        "one_frame": _write(folder, "one.wav", voice[:1], rate),
        "bad_rate_header": _write(
            folder, "zero-rate.wav", raw=header_only[:24] + struct.pack("<I", 0) + header_only[28:]
        ),
    }


def make_speech(path: Path, text: str, seconds: float) -> Path:
    """A PCM-16 WAV of espeak-ng saying ``text``, repeated and cut to ``seconds`` (for scripts; the tests use the
    ``make_speech`` fixture)."""
    import shutil
    import subprocess

    raw = path.with_name(f"raw-{path.name}")
    subprocess.run([shutil.which("espeak-ng") or "espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
    samples, got = soundfile.read(raw, dtype="float32")
    wanted = round(seconds * got)
    samples = np.tile(samples, -(-wanted // len(samples)))[:wanted]
    soundfile.write(path, np.clip(samples, -1.0, 1.0), got, subtype="PCM_16")
    return path
