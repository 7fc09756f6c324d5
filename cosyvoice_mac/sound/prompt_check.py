"""A quick look at an uploaded or recorded prompt before any work is queued: is it audio, how long, how loud.

It runs in the page and API processes and in the CLI, so it is numpy and soundfile only, never torch. It
reads the file with the worker's own reader (``sound.read``) and judges it with the worker's numbers
(``sound.limits``); the worker's checks stay the final word, this only saves the user a wait for an answer
we can give now. A problem is said with ``problems.sentence`` (``PromptCheck.sentence``) by the CLI and the
API; the page shows its translation of it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosyvoice_mac.sound.limits import (
    SILENT_PEAK,
    TOKENIZER_SAMPLE_RATE,
    TRIM_FRAME_LENGTH,
    TRIM_HOP_LENGTH,
    TRIM_TOP_DB,
    prompt_length_problem,
)
from cosyvoice_mac.sound.problems import AudioInputError, sentence
from cosyvoice_mac.sound.read import check_source_rate, read_audio
from cosyvoice_mac.sound.silence import sound_bounds

TRIM_FRAME_SECONDS = TRIM_FRAME_LENGTH / TOKENIZER_SAMPLE_RATE  # the worker's frames, at any rate
TRIM_HOP_SECONDS = TRIM_HOP_LENGTH / TOKENIZER_SAMPLE_RATE


@dataclass(frozen=True)
class PromptCheck:
    """What the check says about one prompt file: its length, and the problem that blocks it (if any).

    ``speech_seconds`` is the length after trimming leading and trailing silence, as the worker trims.
    ``problem`` is one of ``problems.PROBLEMS`` or None; ``details`` fill its sentence (name, rate, ...).
    """

    seconds: float | None = None
    speech_seconds: float | None = None
    problem: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def sentence(self) -> str | None:
        """The problem in one plain English sentence (the CLI's and the API's words); None when ok."""
        return None if self.ok else sentence(self.problem, self.details)


def inspect_prompt(path: str | Path) -> PromptCheck:
    """Read ``path`` and judge it as a voice prompt."""
    path = Path(path)
    try:
        samples, rate = read_audio(path)
    except AudioInputError as error:
        return PromptCheck(seconds=error.details.get("seconds"), problem=error.problem, details=error.details)
    return judge_samples(samples, rate, path.name)


def judge_samples(samples: np.ndarray, rate: int, name: str) -> PromptCheck:
    """Judge (N,) or (N, C) ``samples`` at ``rate`` Hz as a voice prompt called ``name`` in the sentences."""
    samples = np.asarray(samples, dtype=np.float32)
    seconds = samples.shape[0] / rate
    try:
        check_source_rate(name, rate, TOKENIZER_SAMPLE_RATE)
    except AudioInputError as error:
        return PromptCheck(seconds=seconds, problem=error.problem, details=error.details)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    details = {"name": name}
    if not samples.size or not np.isfinite(samples).all():
        problem = "invalid_samples" if samples.size else "no_samples"
        return PromptCheck(seconds=seconds, problem=problem, details=details)
    if float(np.max(np.abs(samples))) < SILENT_PEAK:
        return PromptCheck(seconds=seconds, speech_seconds=0.0, problem="silent", details=details)
    speech = speech_seconds(samples, rate)
    details = {**details, "seconds": seconds, "speech": speech}
    verdict = prompt_length_problem(speech)  # the worker's rule, on the speech its trimming keeps
    if verdict is not None:
        problem, limit = verdict
        return PromptCheck(seconds, speech, problem, {**details, "limit": limit})
    return PromptCheck(seconds, speech, None, details)


def require_usable_prompt(check: PromptCheck) -> PromptCheck:
    """``check`` itself when it passed; else AudioInputError with its problem (its sentence is the message)."""
    if not check.ok:
        raise AudioInputError(check.problem, **check.details)
    return check


def speech_seconds(samples: np.ndarray, rate: int) -> float:
    """Seconds of sound in (N,) ``samples`` by the worker's own rule (``silence.sound_bounds``), with its
    frames and hop scaled from 16 kHz to ``rate`` so that no resampling is needed here."""
    frame = max(1, round(TRIM_FRAME_SECONDS * rate))
    hop = max(1, round(TRIM_HOP_SECONDS * rate))
    start, end = sound_bounds(samples.astype(np.float32), TRIM_TOP_DB, frame, hop)
    return (end - start) / rate


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
