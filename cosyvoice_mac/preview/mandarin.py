"""Mandarin base voice of the preview engine: pypinyin turns Hanzi into tone-numbered pinyin, which
espeak-ng's ``cmn-latn-pinyin`` voice reads (Debian's espeak-ng 1.51 misreads Hanzi given directly).

It is a formant synthesiser: robotic, but intelligible and fully offline. espeak-ng is a system
program (GPL-3.0-or-later) run as a subprocess; without it Chinese text gets a clear error.
"""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
import soundfile

from cosyvoice_mac.preview.piper_tts import SpokenAudio

ESPEAK_VOICE = "cmn-latn-pinyin"
VARIANTS = {"low": "", "high": "+f2"}  # espeak's default male voice, and a female variant
DEFAULT_WORDS_PER_MINUTE = 175
ESPEAK_TIMEOUT_S = 120
INSTALL_HINT = (
    "install espeak-ng (macOS: brew install espeak-ng; Debian/Ubuntu: sudo apt-get install espeak-ng), "
    "or download CosyVoice3 for real Chinese speech (bash run.sh download cosyvoice3)"
)
_PUNCTUATION = str.maketrans(
    {
        "，": ",",
        "、": ",",
        "；": ";",
        "：": ":",
        "。": ".",
        "！": "!",
        "？": "?",
        "“": '"',
        "”": '"',
        "‘": "'",
        "’": "'",
        "（": "(",
        "）": ")",
        "《": " ",
        "》": " ",
    }
)


class MandarinUnavailable(RuntimeError):
    """espeak-ng (or its Mandarin pinyin voice, or pypinyin) is missing: the message says what to install."""


def to_pinyin(text: str) -> str:
    """Hanzi -> space-separated TONE3 pinyin (neutral tone as 5); other characters pass through."""
    try:
        from pypinyin import Style, lazy_pinyin
    except ImportError as error:
        raise MandarinUnavailable(
            f"Chinese text needs pypinyin (pip install pypinyin==0.55.0), or {INSTALL_HINT}"
        ) from error
    syllables = lazy_pinyin(text.translate(_PUNCTUATION), style=Style.TONE3, neutral_tone_with_five=True)
    return " ".join(part.strip() for part in syllables if part.strip())


class MandarinSpeaker:
    """Owns the path of an espeak-ng that has the ``cmn-latn-pinyin`` voice; speaks Chinese text."""

    def __init__(self, executable: str | None = None):
        executable = executable or shutil.which("espeak-ng")
        if executable is None:
            raise MandarinUnavailable(f"Chinese text in the preview voice needs espeak-ng: {INSTALL_HINT}")
        try:
            listing = subprocess.run(
                [executable, "--voices=cmn"], capture_output=True, text=True, timeout=ESPEAK_TIMEOUT_S, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as error:
            raise MandarinUnavailable(f"{executable} does not run ({error}); {INSTALL_HINT}") from error
        if ESPEAK_VOICE not in listing.lower():
            raise MandarinUnavailable(f"{executable} has no {ESPEAK_VOICE} voice; {INSTALL_HINT}")
        self.executable = executable
        self.name = f"espeak-ng-{ESPEAK_VOICE}"

    def speak(self, text: str, seed: int = 0, speed: float = 1.0, variant: str = "low") -> SpokenAudio:
        """Speech for Chinese ``text``; espeak-ng is deterministic, so ``seed`` changes nothing."""
        pinyin = to_pinyin(text)
        command = [
            self.executable,
            "-v",
            ESPEAK_VOICE + VARIANTS[variant],
            "-s",
            str(round(DEFAULT_WORDS_PER_MINUTE * speed)),
            "--stdout",
            "--stdin",
        ]
        try:
            result = subprocess.run(
                command, input=pinyin.encode("utf-8"), capture_output=True, timeout=ESPEAK_TIMEOUT_S, check=True
            )
            samples, rate = soundfile.read(io.BytesIO(result.stdout), dtype="float32")
        except (OSError, subprocess.SubprocessError, RuntimeError) as error:
            raise MandarinUnavailable(f"espeak-ng failed to speak {text[:40]!r}: {error}") from error
        samples = samples.mean(axis=1) if samples.ndim == 2 else samples
        return SpokenAudio(np.ascontiguousarray(samples, dtype=np.float32), int(rate), len(pinyin.split()))
