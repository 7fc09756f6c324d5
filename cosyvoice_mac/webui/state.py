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
    """One finished generation or conversion (read from its sidecar in outputs/), as the history lists it."""

    path: str
    text: str
    mode: str
    voice: str | None
    seed: int
    speed: float
    duration_s: float
    created: float = field(default_factory=time.time)
    model: str | None = None  # the model id, or None for the preview voice
    preview: bool = False
    instruct: str | None = None
    transcript: str | None = None  # what the prompt recording says (zero-shot)
    source: str | None = None  # a voice conversion's recording (its file name; the recording is not kept)
    source_duration_s: float | None = None
    check: str | None = None  # the take check's outcome: passed, retaken, flagged; None: not checked

    @property
    def file_name(self) -> str:
        return Path(self.path).name


@dataclass
class Session:
    """One browser tab's data (kept server-side in a gr.State): the last status line (re-rendered on a
    language switch). Its results are the history's (outputs/), shared by every tab."""

    last_status: tuple[str, dict] | None = None  # (strings key, values): re-rendered on a language switch
    last_output: str | None = None  # the last saved result's WAV (its check and captions are shown under it)


class ActiveJobs:
    """Which job each browser session is running (so its Stop button can cancel it), and every job a session
    submitted that may still wait or run (so closing the tab can cancel them: the page's generator may have
    ended before the job did)."""

    OWNED_PER_SESSION = 20  # a session submits one job at a time; a few more cover clicks in a row

    def __init__(self):
        self._jobs: dict[str, str] = {}
        self._owned: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def set(self, session: str, job_id: str) -> None:
        """``job_id`` is the session's running generation (its Stop button cancels it), and one of its own."""
        with self._lock:
            self._jobs[session] = job_id
        self.own(session, job_id)

    def own(self, session: str, job_id: str) -> None:
        """``job_id`` is one of the session's own jobs (a conversion, say): the queue marks it as the tab's and
        closing the tab cancels it, while Generate's Stop is left to the generation."""
        with self._lock:
            owned = self._owned.setdefault(session, [])
            owned.append(job_id)
            del owned[: -self.OWNED_PER_SESSION]

    def get(self, session: str) -> str | None:
        with self._lock:
            return self._jobs.get(session)

    def owned(self, session: str) -> list[str]:
        with self._lock:
            return list(self._owned.get(session, ()))

    def clear(self, session: str, job_id: str) -> None:
        with self._lock:
            if self._jobs.get(session) == job_id:
                del self._jobs[session]

    def forget(self, session: str) -> list[str]:
        """The session is gone: its jobs, no longer tracked here."""
        with self._lock:
            self._jobs.pop(session, None)
            return self._owned.pop(session, [])


def is_inside(path: str | Path, folder: str | Path) -> bool:
    """True when ``path`` (resolved, links followed) lies inside ``folder``."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        return False
