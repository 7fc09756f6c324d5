"""One take's verdict: the recogniser-free checks (``signal_checks``) and, where a recogniser speaks the text's
language, what it heard against what was asked (``text_match``). The recogniser is handed in (the engine owns
the Whisper model), so this module loads nothing itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cosyvoice_mac.pipeline.takes import thresholds as limits
from cosyvoice_mac.pipeline.takes.signal_checks import (
    NOISE,
    REPEATED_STRETCH,
    duration_bounds,
    duration_problem,
    sound_problems,
    unusable,
)
from cosyvoice_mac.pipeline.takes.text_match import (
    CHARACTER_LANGUAGES,
    error_rate,
    language_of,
    repeated_phrases,
    says_a_phrase_twice,
    units,
)

PASSED, RETAKEN, FLAGGED = "passed", "retaken", "flagged"  # a line's outcome (the /v1 header's values)


@dataclass(frozen=True)
class Word:
    """One word and when it is spoken, in seconds from the start of its audio."""

    word: str
    start: float
    end: float

    def shifted(self, seconds: float) -> "Word":
        return Word(self.word, round(float(self.start + seconds), 3), round(float(self.end + seconds), 3))

    def as_dict(self) -> dict:
        return {"word": self.word, "start": round(float(self.start), 3), "end": round(float(self.end), 3)}


@dataclass(frozen=True)
class Heard:
    """What a recogniser heard in a take: the text and its words with their times."""

    text: str
    words: tuple[Word, ...]
    recogniser: str


class NoRecogniser(Exception):
    """No recogniser for this language here; the message is the reason ("no recogniser for zh")."""


class Recogniser(Protocol):
    def hear(self, audio: np.ndarray, sample_rate: int, language: str | None) -> Heard:
        """What is said in ``audio`` (N,) float32; NoRecogniser where no model speaks ``language``."""
        ...


@dataclass
class TakeVerdict:
    """What the check found in one take: its problems in plain words (empty: it passed) and the facts."""

    problems: list[str]
    duration_s: float
    expected_s: tuple[float, float] | None = None
    metric: str | None = None  # "WER" or "CER"
    error_rate: float | None = None
    heard: str | None = None
    recogniser: str | None = None  # its name, or "not checked: <why>"
    words: list[Word] = field(default_factory=list)  # the recogniser's words, times from the take's start
    unusable: bool = False  # no speech to keep at all (silent, non-finite, noise): always the worst take

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def badness(self) -> tuple:
        """Sorts takes best first: usable, fewest problems, lowest error rate, closest to the expected length."""
        return (self.unusable, len(self.problems), self.error_rate or 0.0)

    def summary(self) -> str:
        return ", ".join(self.problems) if self.problems else "passed"

    def as_dict(self) -> dict:
        return {
            "passed": self.passed,
            "problems": list(self.problems),
            "duration_s": round(self.duration_s, 3),
            "expected_s": [round(bound, 2) for bound in self.expected_s] if self.expected_s else None,
            "metric": self.metric,
            "error_rate": None if self.error_rate is None else round(self.error_rate, 4),
            "heard": self.heard,
            "recogniser": self.recogniser,
        }


class VoiceRates:
    """Owns each voice's speaking rate (seconds per unit of text) learned from its passing takes, so the duration
    bounds follow the voice once it has spoken a few sentences."""

    def __init__(self):
        self._rates: dict[tuple[str, bool], tuple[int, float]] = {}

    def seconds_per_unit(self, voice: str | None, language: str | None) -> float | None:
        count, rate = self._rates.get((voice or "", language in CHARACTER_LANGUAGES), (0, 0.0))
        return rate if count >= limits.LEARNED_AFTER_TAKES else None

    def learn(self, voice: str | None, language: str | None, unit_count: int, seconds: float) -> None:
        if unit_count <= 0:
            return
        key = (voice or "", language in CHARACTER_LANGUAGES)
        count, rate = self._rates.get(key, (0, 0.0))
        self._rates[key] = (count + 1, (rate * count + seconds / unit_count) / (count + 1))


def check_take(
    audio: np.ndarray,
    sample_rate: int,
    text: str,
    recogniser: Recogniser | None,
    *,
    speed: float = 1.0,
    voice: str | None = None,
    rates: VoiceRates | None = None,
) -> TakeVerdict:
    """Judge one take of ``text`` (N,) float32 at ``sample_rate``; ``voice`` keys the learned rates."""
    duration = len(audio) / sample_rate
    reason = unusable(audio)
    if reason is not None:
        return TakeVerdict([reason], duration, unusable=True)
    language = language_of(text)
    unit_count = len(units(text, language))
    learned = rates.seconds_per_unit(voice, language) if rates is not None else None
    bounds = duration_bounds(unit_count, language, speed, learned)
    problems = [problem for problem in (duration_problem(duration, bounds),) if problem]
    problems += sound_problems(audio, sample_rate)
    if REPEATED_STRETCH in problems and says_a_phrase_twice(text, language, limits.REPEAT_PHRASE_WORDS):
        problems.remove(REPEATED_STRETCH)  # the text repeats itself: the recogniser's count of phrases judges it
    verdict = TakeVerdict(problems, duration, bounds, unusable=NOISE in problems)
    if recogniser is not None and NOISE not in problems:  # Whisper on noise only hallucinates, slowly
        _compare_heard(verdict, audio, sample_rate, text, language, recogniser)
    if verdict.passed and rates is not None:
        rates.learn(voice, language, unit_count, duration * speed)
    return verdict


def _compare_heard(verdict: TakeVerdict, audio, sample_rate, text, language, recogniser) -> None:
    try:
        heard = recogniser.hear(audio, sample_rate, language)
    except NoRecogniser as missing:
        verdict.recogniser = f"not checked: {missing}"
        return
    verdict.heard, verdict.words, verdict.recogniser = heard.text, list(heard.words), heard.recogniser
    characters = language in CHARACTER_LANGUAGES
    verdict.metric = "CER" if characters else "WER"
    verdict.error_rate = error_rate(text, heard.text, language)
    limit = limits.MAX_CHARACTER_ERROR_RATE if characters else limits.MAX_WORD_ERROR_RATE
    judged = len(units(text, language)) >= limits.MIN_UNITS_FOR_ERROR_RATE or not units(heard.text, language)
    if judged and verdict.error_rate > limit:
        verdict.problems.append(f"{verdict.metric} {round(verdict.error_rate * 100)} %")
    if repeated_phrases(text, heard.text, language, limits.REPEAT_PHRASE_WORDS):
        verdict.problems.append("a phrase repeated")
