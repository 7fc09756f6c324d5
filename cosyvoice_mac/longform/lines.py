"""One line of a long job as it is asked for (``LineRequest``) and as it comes back (``Spoken``), and what speaks it
(``Speak``: the page, the API and the CLI pass ``speakers.EngineSpeak``). The runner asks for each line in turn;
``retakes`` records and reuses them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

import numpy as np

from cosyvoice_mac.request import Request, Sampling, Voice


@dataclass(frozen=True)
class LineRequest:
    """One line to speak: text in a saved voice (None: the job's default voice) and its recording of ``style``
    (None: its own), instruction, speed, seed, and how its speech tokens are drawn (the job's ``sampling``;
    unset: the model's own)."""

    text: str
    voice: str | None = None
    instruct: str | None = None
    speed: float = 1.0
    seed: int | None = None
    number: int | None = None  # the line's number in its script, subtitles or batch file (``retakes`` keys by it)
    sampling: Sampling = Sampling()
    style: str | None = None

    def request(self, voice: Voice, check: bool | None = None) -> Request:
        """This line as the engine's request, spoken in ``voice`` (``check``: the take check for it; None follows
        the global switch). RequestError when the line breaks a request rule."""
        return Request.build(
            self.text,
            voice,
            instruct=self.instruct,
            seed=self.seed,
            speed=self.speed,
            sampling=self.sampling,
            check=check,
        )


@dataclass(frozen=True)
class Spoken:
    """A spoken line: (T,) float32 audio at ``sample_rate`` and the facts of the request (for sidecars)."""

    audio: np.ndarray
    sample_rate: int
    facts: dict = field(default_factory=dict)
    words: list[dict] | None = None  # the line's words and their times in ``audio`` (None: not timed)


class Speak(Protocol):
    def __call__(self, line: LineRequest) -> Spoken: ...

    def prepare(self, voices: Iterable[tuple[str | None, str | None]]) -> None:
        """Make the job's (voice, style) pairs (None: the default voice; its own recording) ready before its
        first line, or raise saying which one cannot be used (a style the voice has no recording of included);
        called once, after the input is checked and before any line is spoken."""

    def styles(self, voice: str | None) -> tuple[str, ...]:
        """The styles the saved voice ``voice`` (None: the default voice) has recordings of, which a line's inline
        ``(style)`` tags may name beside the model's own; none for a voice that is no saved one."""
