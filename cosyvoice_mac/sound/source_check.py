"""A quick look at a recording to convert into another voice, before any work is queued: is it audio, is
its rate usable, is it within the length limit, is there sound in it.

Like ``prompt_check`` it runs in the page and API processes and in the CLI (numpy and soundfile, never
torch), reads with the one reader (``sound.read``) and says a problem with ``problems.sentence``. Whether the
sound is speech rather than noise or music is heard by the speech detector in the worker, which says it with
the same sentence (``no_speech``); this check only saves the user a wait for what it can answer now.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosyvoice_mac.sound.limits import (
    MAX_CONVERT_SECONDS,
    MIN_CONVERT_SAMPLE_RATE,
    MIN_CONVERT_SPEECH_SECONDS,
    SILENT_PEAK,
    TOKENIZER_SAMPLE_RATE,
)
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.prompt_check import PromptCheck, speech_seconds
from cosyvoice_mac.sound.read import check_resampleable, read_audio


def inspect_source(path: str | Path) -> PromptCheck:
    """Read ``path`` and judge it as a recording to convert (``PromptCheck``: its length, sound and problem)."""
    path = Path(path)
    try:
        samples, rate = read_audio(path)
    except AudioInputError as error:
        if error.problem == "too_long":  # the reader's limit is the conversion's: say it as one
            seconds = error.details.get("seconds", MAX_CONVERT_SECONDS)
            return PromptCheck(seconds, None, "source_too_long", _too_long(path.name, seconds))
        return PromptCheck(seconds=error.details.get("seconds"), problem=error.problem, details=error.details)
    return judge_source(samples, rate, path.name)


def judge_source(samples: np.ndarray, rate: int, name: str) -> PromptCheck:
    """Judge decoded ``samples`` (N,) or (N, channels) at ``rate`` Hz as a recording to convert."""
    seconds = samples.shape[0] / rate
    details = {"name": name, "seconds": seconds}
    if rate < MIN_CONVERT_SAMPLE_RATE:
        return PromptCheck(
            seconds, None, "source_low_rate", {**details, "rate": rate, "limit": MIN_CONVERT_SAMPLE_RATE}
        )
    try:
        check_resampleable(name, rate, TOKENIZER_SAMPLE_RATE)
    except AudioInputError as error:
        return PromptCheck(seconds, None, error.problem, error.details)
    if seconds > MAX_CONVERT_SECONDS:
        return PromptCheck(seconds, None, "source_too_long", _too_long(name, seconds))
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    if not mono.size or float(np.max(np.abs(mono))) < SILENT_PEAK:
        return PromptCheck(seconds, 0.0, "silent", details)
    speech = speech_seconds(mono, rate)
    if speech < MIN_CONVERT_SPEECH_SECONDS:
        return PromptCheck(
            seconds, speech, "too_little_speech", {**details, "speech": speech, "limit": MIN_CONVERT_SPEECH_SECONDS}
        )
    return PromptCheck(seconds, speech, None, {**details, "speech": speech})


def _too_long(name: str, seconds: float) -> dict:
    return {"name": name, "seconds": seconds, "limit": MAX_CONVERT_SECONDS, "minutes": MAX_CONVERT_SECONDS / 60}
