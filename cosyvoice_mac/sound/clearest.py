"""The clearest stretch of a prompt that is too long: the window of ``CLEAREST_SECONDS`` that holds the most
speech by the worker's silence rule (frames within ``TRIM_TOP_DB`` of the loudest, as ``sound.silence`` trims),
its edges moved into the nearest pause so no word is cut. Numpy and soundfile only (the page, the API and the
CLI run it), like ``prompt_check``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from cosyvoice_mac.sound.limits import TOKENIZER_SAMPLE_RATE, TRIM_FRAME_LENGTH, TRIM_HOP_LENGTH, TRIM_TOP_DB
from cosyvoice_mac.sound.read import read_audio

CLEAREST_SECONDS = 12.0  # within the 5-15 s that works best, well under the 30 s limit
EDGE_SEARCH_SECONDS = 1.5  # how far an edge may move to land in a pause
PAUSE_DB = 35.0  # a frame this far below the loudest is a pause an edge may sit in
HOP_SECONDS = TRIM_HOP_LENGTH / TOKENIZER_SAMPLE_RATE
FRAME_SECONDS = TRIM_FRAME_LENGTH / TOKENIZER_SAMPLE_RATE


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


def keep_clearest(path: str | Path, folder: str | Path, seconds: float = CLEAREST_SECONDS) -> tuple[Path, Span]:
    """Write the clearest ``seconds`` of the recording at ``path`` as a WAV in ``folder``; (its path, the span)."""
    samples, rate = read_audio(path)
    mono = samples if samples.ndim == 1 else samples.mean(axis=1)
    span = clearest_span(mono, rate, seconds)
    kept = mono[round(span.start * rate) : round(span.end * rate)]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{Path(path).stem}-clearest-{span.start:.1f}-{span.end:.1f}.wav"
    soundfile.write(out, kept, rate, subtype="PCM_16")
    return out, span


TRIM_HINT = {  # how each door asks for the clearest stretch, said where a prompt is refused as too long
    "cli": "or pass --prompt-trim auto to keep its clearest 12 s",
    "v1": "or send prompt_trim=auto to keep its clearest 12 s",
}


def with_trim_hint(sentence: str, door: str) -> str:
    """A too-long prompt's sentence with the door's way to keep the clearest stretch instead."""
    return f"{sentence.rstrip('.')}; {TRIM_HINT[door]}."
