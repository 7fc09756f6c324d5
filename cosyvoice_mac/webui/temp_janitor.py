"""Keeps Gradio's temporary folder bounded: uploads and the copies of results it serves are deleted once
they are older than an age the user chose (``--temp-max-age``).

Gradio copies every result it serves into this folder and keeps the copies until the server stops (its own
``delete_cache`` option deletes nothing in the Gradio release we use), so a long session would fill the disk.
Age counts from the last time Gradio wrote or handed out a file (it touches a copy it serves again), so a
player showing a recent result keeps working; ``job-prompts/`` holds the copies queued jobs own and is left to
them.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

KEPT_FOLDERS = frozenset({"job-prompts"})


class TempJanitor:
    """Owns the sweeping of one temporary folder: a daemon thread deleting files older than ``max_age_s``."""

    def __init__(self, folder: str | Path, max_age_s: float, every_s: float | None = None):
        self.folder = Path(folder)
        self.max_age_s = float(max_age_s)
        self.every_s = every_s if every_s is not None else min(300.0, max(1.0, self.max_age_s / 4))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> TempJanitor:
        self._thread = threading.Thread(target=self._run, name="cosyvoice-temp-janitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def sweep(self, now: float | None = None) -> int:
        """Delete what is too old (and the folders that leaves empty); how many files went."""
        now = time.time() if now is None else now
        removed = 0
        for root, folders, files in os.walk(self.folder, topdown=True):
            if Path(root) == self.folder:
                folders[:] = [name for name in folders if name not in KEPT_FOLDERS]
            for name in files:
                path = Path(root) / name
                try:
                    facts = path.lstat()
                    if now - max(facts.st_mtime, facts.st_ctime) > self.max_age_s:
                        path.unlink()
                        removed += 1
                except OSError:  # gone already, or in use where the OS refuses: try next time
                    continue
        for root, folders, files in os.walk(self.folder, topdown=False):
            if Path(root) != self.folder and not folders and not files and Path(root).name not in KEPT_FOLDERS:
                try:
                    Path(root).rmdir()
                except OSError:
                    pass
        return removed

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sweep()
            except OSError:  # the folder itself went away (shutting down)
                pass
