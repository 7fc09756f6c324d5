"""A long job's progress and what it leaves (``LongformResult``): what every long-form runner reports and returns
(``runner`` for spoken lines, ``convert_batch`` for recordings re-spoken)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Progress:
    """After each line: how many are done of how many, seconds so far and an estimate of what is left."""

    done: int
    total: int
    elapsed_s: float
    label: str

    @property
    def left_s(self) -> float | None:
        return self.elapsed_s / self.done * (self.total - self.done) if self.done else None

    def describe(self) -> str:
        left = f", about {self.left_s:.0f} s left" if self.left_s is not None and self.done < self.total else ""
        return f"{self.done}/{self.total} {self.label}{left}"


@dataclass(frozen=True)
class LongformResult:
    """What a job left in outputs/: the main WAV (or folder), its companion files, and whether it was stopped."""

    kind: str
    audio_path: Path | None
    files: tuple[Path, ...]
    done: int
    total: int
    stopped: bool
    report: list[dict] = field(default_factory=list)
    not_saved: str | None = None  # why some of it is not where it belongs in outputs/ (None: all saved)
    timestamps: list[dict] | None = None  # every word on the main WAV's timeline: {word, start, end}
    flagged: list[str] = field(default_factory=list)  # the lines whose best take still failed the check, and why
    retaken: list[int] = field(default_factory=list)  # the lines a retake made again (``retakes.Retake``)


OnProgress = Callable[[Progress], None]
ShouldStop = Callable[[], bool]


def never() -> bool:
    return False


class Tracker:
    """Reports a job's progress (done of ``total``, in ``label``s) to ``on_progress`` after each item."""

    def __init__(self, total: int, label: str, on_progress: OnProgress | None):
        self.total, self.label, self.on_progress, self.started = total, label, on_progress, time.monotonic()

    def report(self, done: int) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(done, self.total, time.monotonic() - self.started, self.label))
