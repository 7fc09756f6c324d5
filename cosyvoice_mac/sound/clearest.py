"""The part of a prompt recording that is used: the clearest stretch of one that is too long (the window of
``CLEAREST_SECONDS`` that holds the most speech by the worker's silence rule, frames within ``TRIM_TOP_DB`` of the
loudest as ``sound.silence`` trims, its edges moved into the nearest pause so no word is cut), or a span the person
chose (the page's waveform, ``--prompt-trim 12.5-24.5``, ``/v1``'s ``prompt_trim``). One reading of the
``prompt_trim`` setting for every door (``parse_trim``), one cut (``keep_span``). Numpy and soundfile only (the
page, the API and the CLI run it), like ``prompt_check``.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from cosyvoice_mac.sound.limits import (
    MAX_SECONDS,
    TAIL_SECONDS,
    TOKENIZER_SAMPLE_RATE,
    TRIM_FRAME_LENGTH,
    TRIM_HOP_LENGTH,
    TRIM_TOP_DB,
)
from cosyvoice_mac.sound.read import read_audio

CLEAREST_SECONDS = 12.0  # within the 5-15 s that works best, well under the 30 s limit
EDGE_SEARCH_SECONDS = 1.5  # how far an edge may move to land in a pause
PAUSE_DB = 35.0  # a frame this far below the loudest is a pause an edge may sit in
HOP_SECONDS = TRIM_HOP_LENGTH / TOKENIZER_SAMPLE_RATE
FRAME_SECONDS = TRIM_FRAME_LENGTH / TOKENIZER_SAMPLE_RATE
SHORTEST_SPAN_SECONDS = 3.0  # the prompt field's "3-30 s is taken": a chosen span is never shorter
LONGEST_SPAN_SECONDS = MAX_SECONDS - TAIL_SECONDS  # the speech that fits with the tail the worker appends
WAVE_BINS = 480  # the page's waveform: one bar per bin, enough for a wide window, ~3 KB of JSON

OFF, AUTO = "off", "auto"  # the prompt_trim setting's words; a chosen span is (start, end) in seconds
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Span:
    """Seconds from the recording's start: the part kept, and the whole recording's length."""

    start: float
    end: float
    total: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def frame_levels(samples: np.ndarray, rate: int) -> np.ndarray:
    """Each hop's loudness in dB below the loudest frame (0 for the loudest)."""
    frame, hop = max(1, round(FRAME_SECONDS * rate)), max(1, round(HOP_SECONDS * rate))
    count = max(1, 1 + (len(samples) - frame) // hop)
    starts = np.arange(count) * hop
    power = np.array([np.mean(np.square(samples[s : s + frame], dtype=np.float32)) for s in starts])
    decibels = 10 * np.log10(np.maximum(power, 1e-12))
    return decibels - decibels.max()


def clearest_span(samples: np.ndarray, rate: int, seconds: float = CLEAREST_SECONDS) -> Span:
    """The window of ``seconds`` with the most speech, edges moved into pauses (the whole when it is shorter)."""
    total = len(samples) / rate
    if total <= seconds:
        return Span(0.0, total, total)
    levels = frame_levels(samples, rate)
    speech = (levels > -TRIM_TOP_DB).astype(np.int64)
    width = max(1, round(seconds / HOP_SECONDS))
    counts = np.convolve(speech, np.ones(width, np.int64), mode="valid")
    first = int(np.argmax(counts))  # the earliest of the best windows
    start = _into_pause(levels, first, -1)
    end = _into_pause(levels, first + width, 1)
    return Span(round(start * HOP_SECONDS, 3), round(min(total, end * HOP_SECONDS), 3), total)


def _into_pause(levels: np.ndarray, index: int, direction: int) -> int:
    """The nearest pause frame at ``index`` or beyond it on the window's outer side (``direction`` -1: before,
    1: after), within EDGE_SEARCH_SECONDS; else ``index``. Moving outwards keeps every frame the window counted."""
    reach = round(EDGE_SEARCH_SECONDS / HOP_SECONDS)
    for step in range(reach + 1):
        frame = index + direction * step
        if frame < 0 or frame >= len(levels):
            break
        if levels[frame] < -PAUSE_DB:
            return frame
    return min(max(index, 0), len(levels))


def read_mono(path: str | Path) -> tuple[np.ndarray, int]:
    """The recording's samples as one channel, and its rate (``read_audio``'s errors)."""
    samples, rate = read_audio(path)
    return (samples if samples.ndim == 1 else samples.mean(axis=1)), rate


def keep_clearest(path: str | Path, folder: str | Path, seconds: float = CLEAREST_SECONDS) -> tuple[Path, Span]:
    """Write the clearest ``seconds`` of the recording at ``path`` as a WAV in ``folder``; (its path, the span)."""
    mono, rate = read_mono(path)
    span = clearest_span(mono, rate, seconds)
    return _write_span(path, mono, rate, span, folder), span


def keep_span(path: str | Path, folder: str | Path, start: float, end: float) -> tuple[Path, Span]:
    """Write ``start``-``end`` seconds of the recording at ``path`` as a WAV in ``folder``; (its path, the span).
    An end past the recording's stops at its end; ValueError in a sentence when the span starts after it."""
    mono, rate = read_mono(path)
    total, start = len(mono) / rate, max(0.0, start)
    if start >= total:
        raise ValueError(f"the span {start:g}-{end:g} s starts after the recording ends ({total:.1f} s)")
    span = Span(round(start, 3), round(min(end, total), 3), total)
    return _write_span(path, mono, rate, span, folder), span


def _write_span(path: str | Path, mono: np.ndarray, rate: int, span: Span, folder: str | Path) -> Path:
    """The span as a new WAV in ``folder``, named after the recording and the span; a short random part keeps
    two cuts of the same span apart (the page tells its own cut from another file by name)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{Path(path).stem}-{span.start:.1f}-{span.end:.1f}-{uuid.uuid4().hex[:8]}.wav"
    soundfile.write(out, mono[round(span.start * rate) : round(span.end * rate)], rate, subtype="PCM_16")
    return out


def wave_peaks(samples: np.ndarray, bins: int = WAVE_BINS) -> list[float]:
    """The recording's outline for a waveform: each bin's peak over the loudest, rounded to 3 decimals."""
    edges = np.linspace(0, len(samples), min(bins, len(samples)) + 1).astype(int)
    peaks = np.array([np.abs(samples[a:b]).max() for a, b in zip(edges[:-1], edges[1:])], np.float32)
    loudest = float(peaks.max()) if peaks.size else 0.0
    return [round(float(peak) / loudest, 3) if loudest > 0 else 0.0 for peak in peaks]


def parse_trim(value: str | None, option: str) -> str | tuple[float, float]:
    """The ``prompt_trim`` setting as a door received it: OFF (None or empty too), AUTO, or a chosen span
    ``(start, end)`` in seconds from "START-END"; ValueError naming ``option`` (the door's name for it)."""
    words = (value or OFF).strip().lower()
    if words in (OFF, AUTO):
        return words
    found = _SPAN.fullmatch(words)
    if found:
        start, end = float(found[1]), float(found[2])
        if math.isfinite(end) and end > start:
            return start, end
    raise ValueError(
        f"{option} is off, auto, or a span of the recording in seconds such as 12.5-24.5 (start before end); "
        f"got {value!r}"
    )


def wants_cut(trim: str | tuple[float, float], too_long: bool) -> bool:
    """Whether a door cuts the recording for ``trim``: a chosen span always, auto only for a recording over the
    limit."""
    return isinstance(trim, tuple) or (trim == AUTO and too_long)


def cut_prompt(path: str | Path, trim: str | tuple[float, float], folder: str | Path) -> tuple[Path, Span]:
    """The part of the recording ``trim`` keeps (AUTO: the clearest stretch; a tuple: that span) as a WAV in
    ``folder``; (its path, the span)."""
    if isinstance(trim, tuple):
        return keep_span(path, folder, *trim)
    return keep_clearest(path, folder)


TRIM_HINT = {  # how each door asks for the clearest stretch, said where a prompt is refused as too long
    "cli": "or pass --prompt-trim auto to keep its clearest 12 s (or --prompt-trim START-END for a span you choose)",
    "v1": "or send prompt_trim=auto to keep its clearest 12 s (or prompt_trim=START-END for a span you choose)",
}


def with_trim_hint(sentence: str, door: str) -> str:
    """A too-long prompt's sentence with the door's way to keep the clearest stretch instead."""
    return f"{sentence.rstrip('.')}; {TRIM_HINT[door]}."
