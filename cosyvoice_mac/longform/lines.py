"""One line of a long job as it is asked for (``LineRequest``) and as it comes back (``Spoken``), and what speaks it
(``Speak``: the page, the API and the CLI pass ``speakers.EngineSpeak``). The runner asks for each line in turn;
``retakes`` records and reuses them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

import numpy as np


@dataclass(frozen=True)
class LineRequest:
    """One line to speak: text in a saved voice (None: the job's default voice), instruction, speed, seed."""

    text: str
    voice: str | None = None
    instruct: str | None = None
    speed: float = 1.0
    seed: int | None = None
    number: int | None = None  # the line's number in its script, subtitles or batch file (``retakes`` keys by it)


@dataclass(frozen=True)
class Spoken:
    """A spoken line: (T,) float32 audio at ``sample_rate`` and the facts of the request (for sidecars)."""

    audio: np.ndarray
    sample_rate: int
    facts: dict = field(default_factory=dict)
    words: list[dict] | None = None  # the line's words and their times in ``audio`` (None: not timed)


class Speak(Protocol):
    def __call__(self, line: LineRequest) -> Spoken: ...

    def prepare(self, voices: Iterable[str | None]) -> None:
        """Make the job's voices (None: the default) ready before its first line, or raise saying which one
        cannot be used; called once, after the input is checked and before any line is spoken."""
