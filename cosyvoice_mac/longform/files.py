"""Where a long job's files go, and what is said when they cannot go there.

A result in outputs/ is named by :func:`result_stem`: the time and the long job's own id (fresh for each job,
never reused), so two jobs started in the same second keep apart; and every file is written whole and never
over an existing one (``atomic_write(replace=False)``), unless the name is the user's own (a command's
``--out``, or a batch's folder, which a re-run resumes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from cosyvoice_mac.engine.jobs import new_job_id
from cosyvoice_mac.engine.outputs import explain_write_error
from cosyvoice_mac.engine.sidecar import Sidecar
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.sound.wav import wav_bytes

STEM_ID_CHARS = 12  # of the long job's id: 48 random bits, so no two jobs ever share a name


def result_stem(folder: Path, kind: str, job_id: str | None = None) -> Path:
    """``folder/YYYYmmdd-HHMMSS-<kind>-<job id>``: the name of one long job's files in outputs/. The id is
    the job's own (a fresh one when None)."""
    return Path(folder) / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{(job_id or new_job_id())[:STEM_ID_CHARS]}"


class ResultFiles:
    """Owns how one long job writes its files: at the paths asked for, replacing a file there only when
    ``replace``; when that folder refuses a file (a full disk, a read-only folder) and a ``fallback`` folder
    was given, the file goes there instead (same name) and ``not_saved`` says why, so the audio is not lost.
    Without a fallback the refusal is raised (OutputWriteError, saying why and what to do)."""

    def __init__(self, replace: bool = False, fallback: Path | None = None):
        self.replace, self.fallback = replace, fallback
        self.not_saved: str | None = None  # the first reason something was not saved where it belongs

    def note_unsaved(self, reason: str) -> None:
        if self.not_saved is None:
            self.not_saved = reason

    def wav(self, path: Path, audio: np.ndarray, sample_rate: int, facts: dict) -> list[Path]:
        """A WAV and its sidecar (``engine.sidecar``: the facts, also in the WAV's INFO chunk); the paths they
        were written to."""
        sidecar = Sidecar.new(path.name, len(audio), sample_rate, facts)
        wav = self._put(path, wav_bytes(audio, sample_rate, sidecar.wav_info()))
        return [wav, self._put(path.with_suffix(".json"), sidecar.json_bytes())]

    def json(self, path: Path, data: dict, indent: int = 1) -> Path:
        return self._put(path, json.dumps(data, ensure_ascii=False, indent=indent).encode("utf-8"))

    def _put(self, path: Path, data: bytes) -> Path:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, replace=self.replace)
            return path
        except FileExistsError:
            raise  # a name taken is a bug of the naming, not a full disk: never hidden
        except OSError as error:
            explained = explain_write_error(error, path.parent)
            if self.fallback is None:
                raise explained from error
            self.note_unsaved(str(explained))
        target = self.fallback / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data, replace=self.replace)
        return target
