"""Subtitle dubbing: each cue of an .srt spoken and fitted into its time slot on one timeline.

Fitting a cue (``fit_speed``): speech that fits its slot is left at the speed asked for; longer speech is
made again faster, up to the user's limit; what still does not fit is never cut: it runs on into the gap
before the next cue, and where it would overlap the next cue, that cue and the ones after it start later.
Every cue that did not fit is reported with how much it overran and how late the next one starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import srt

from cosyvoice_mac.longform import LongformError, check_inline_markup
from cosyvoice_mac.settings import bounds

MAX_CUES = 2000
SPEED_LIMIT_RANGE = bounds("speed_limit")
MISFIT_S = 0.005  # a cue is reported as not fitting from this slip on (what "+0.01 s" rounds from)
_MARKUP = re.compile(r"<[^<>]{1,40}>|\{\\[^{}]{0,40}\}")  # <i>, </font>, {\an8}


class SubtitleError(LongformError):
    """A subtitle file that cannot be dubbed; the message names the cue."""


@dataclass(frozen=True)
class Cue:
    """One subtitle: its number as written in the file, start and end (seconds), and the text to speak."""

    number: int
    start: float
    end: float
    text: str

    @property
    def slot(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class PlacedCue:
    """A spoken cue on the timeline: where it starts, how long it is, at what speed it was made."""

    cue: Cue
    start: float
    duration: float
    speed: float

    @property
    def overrun(self) -> float:
        """Seconds past the cue's own end (0 when it fits)."""
        return max(0.0, self.start + self.duration - self.cue.end)

    def as_dict(self) -> dict:
        return {
            "cue": self.cue.number,
            "text": self.cue.text,
            "cue_start": self.cue.start,
            "cue_end": self.cue.end,
            "start": round(self.start, 3),
            "end": round(self.start + self.duration, 3),
            "speed": round(self.speed, 3),
            "overrun": round(self.overrun, 3),
            "late": round(self.start - self.cue.start, 3),
        }


def parse_srt(data: str | bytes) -> list[Cue]:
    """The cues in file order; SubtitleError naming the cue for bad timestamps, overlaps or empty files."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise SubtitleError(f"the subtitle file is not UTF-8 text (byte {error.start})") from None
    data = data.replace("\r\n", "\n")
    try:
        parsed = list(srt.parse(data))
    except srt.SRTParseError as error:
        raise SubtitleError(
            f"cue {_cue_at(data, error)}: the block is not a valid subtitle (expected a number, "
            "then 'HH:MM:SS,mmm --> HH:MM:SS,mmm', then the text)"
        ) from None
    cues, previous = [], None
    for position, item in enumerate(parsed, start=1):
        number = item.index if item.index is not None else position
        start, end = item.start.total_seconds(), item.end.total_seconds()
        if end <= start:
            raise SubtitleError(f"cue {number}: it ends ({_clock(end)}) before it starts ({_clock(start)})")
        if previous is not None and start < previous.end - 1e-6:
            raise SubtitleError(
                f"cue {number} starts at {_clock(start)}, before cue {previous.number} ends "
                f"({_clock(previous.end)}); overlapping cues cannot be dubbed with one voice"
            )
        text = " ".join(_MARKUP.sub("", item.content).split())
        cue = Cue(number, start, end, text)
        if text:
            check_inline_markup(text, f"cue {number}", SubtitleError)
            cues.append(cue)
        previous = cue
    if not cues:
        raise SubtitleError("the subtitle file has no cues with text")
    if len(cues) > MAX_CUES:
        raise SubtitleError(f"the subtitle file has {len(cues)} cues; at most {MAX_CUES} are dubbed in one go")
    return cues


def check_speed_limit(limit: float) -> float:
    low, high = SPEED_LIMIT_RANGE
    if not low <= limit <= high:
        raise SubtitleError(f"the speed-up limit must be {low:g}-{high:g} (got {limit:g})")
    return float(limit)


def fit_speed(duration: float, slot: float, speed: float, limit: float) -> float | None:
    """The speed to make a cue again at so that ``duration`` s (made at ``speed``) fits ``slot`` s, or None
    when it already fits. Never above ``limit``; a 3 % margin covers the model's inexact length control."""
    if duration <= slot:
        return None
    wanted = speed * duration / slot * 1.03
    return min(wanted, limit) if min(wanted, limit) > speed + 1e-3 else None


def place(cues: list[Cue], durations: list[float], speeds: list[float]) -> list[PlacedCue]:
    """Each cue at its start, or right after the one before it where that one runs on."""
    placed, free_from = [], 0.0
    for cue, duration, speed in zip(cues, durations, speeds):
        start = max(cue.start, free_from)
        placed.append(PlacedCue(cue, start, duration, speed))
        free_from = start + duration
    return placed


def render_timeline(placed: list[PlacedCue], waves: list[np.ndarray], sample_rate: int) -> np.ndarray:
    """One waveform on the subtitle timeline: silence where nobody speaks. (T,) float32."""
    end = max(max(p.start + len(w) / sample_rate for p, w in zip(placed, waves)), placed[-1].cue.end)
    out = np.zeros(int(np.ceil(end * sample_rate)) + 1, dtype=np.float32)
    for item, wave in zip(placed, waves):
        offset = int(round(item.start * sample_rate))
        out[offset : offset + len(wave)] += np.asarray(wave, dtype=np.float32)
    return out


def misfit_report(placed: list[PlacedCue]) -> list[dict]:
    """Cues that overran their own end or started late by MISFIT_S or more, with by how much (seconds): a
    smaller slip is neither heard nor worth a line (it would read "+0.00 s")."""
    return [item.as_dict() for item in placed if item.overrun >= MISFIT_S or item.start - item.cue.start >= MISFIT_S]


def _clock(seconds: float) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    return f"{int(hours):02d}:{int(minutes):02d}:{rest:06.3f}".replace(".", ",")


def _cue_at(data: str, error: srt.SRTParseError) -> str:
    """The number of the block where parsing stopped (its index line, else its position)."""
    unmatched = getattr(error, "unmatched_content", "") or data[getattr(error, "actual_start", 0) :]
    first = unmatched.strip().splitlines()[0].strip() if unmatched.strip() else ""
    if first.isdigit():
        return first
    before = data[: len(data) - len(unmatched)]
    return str(len([block for block in before.split("\n\n") if block.strip()]) + 1)
