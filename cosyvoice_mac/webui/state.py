"""What the web UI keeps for each browser session between clicks: its history, its status line, its job.

Nothing here imports gradio or torch; the model host every visitor shares is ``engine.host.ModelHost``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class HistoryEntry:
    """One finished generation of this session, as the history panel lists it."""

    path: str
    text: str
    mode: str
    voice: str | None
    seed: int
    speed: float
    duration_s: float
    created: float = field(default_factory=time.time)
    model: str | None = None  # the model folder's name, or None for the preview voice
    preview: bool = False

    @property
    def file_name(self) -> str:
        return Path(self.path).name


@dataclass
class Session:
    """One browser tab's data (kept server-side in a gr.State): its outputs, newest first, and the last
    status line (re-rendered on a language switch)."""

    history: list[HistoryEntry] = field(default_factory=list)
    last_status: tuple[str, dict] | None = None  # (strings key, values): re-rendered on a language switch

    def add(self, entry: HistoryEntry) -> None:
        self.history.insert(0, entry)

    def find(self, file_name: str | None) -> HistoryEntry | None:
        """The entry whose file is ``file_name``: only this session's own outputs can be replayed."""
        return next((entry for entry in self.history if entry.file_name == file_name), None)


class ActiveJobs:
    """Which job each browser session is running, so its Stop button can cancel it."""

    def __init__(self):
        self._jobs: dict[str, str] = {}
        self._lock = threading.Lock()

    def set(self, session: str, job_id: str) -> None:
        with self._lock:
            self._jobs[session] = job_id

    def get(self, session: str) -> str | None:
        with self._lock:
            return self._jobs.get(session)

    def clear(self, session: str, job_id: str) -> None:
        with self._lock:
            if self._jobs.get(session) == job_id:
                del self._jobs[session]


def is_inside(path: str | Path, folder: str | Path) -> bool:
    """True when ``path`` (resolved, links followed) lies inside ``folder``."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        return False
