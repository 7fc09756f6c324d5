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
    ``replace``. Files that belong together (a WAV, its sidecar, a dialogue's timing) are written as one group,
    the WAV first: when the folder refuses any of them (a full disk, a read-only folder) the group's files
    already written there are removed, so no sidecar is ever left without its WAV. With a ``fallback`` folder
    the whole group then goes there instead (same names) and ``not_saved`` says why, so the audio is not lost;
    without one the refusal is raised (OutputWriteError, saying why and what to do)."""

    def __init__(self, replace: bool = False, fallback: Path | None = None):
        self.replace, self.fallback = replace, fallback
        self.not_saved: str | None = None  # the first reason something was not saved where it belongs

    def note_unsaved(self, reason: str) -> None:
        if self.not_saved is None:
            self.not_saved = reason

    def wav(
        self,
        path: Path,
        audio: np.ndarray,
        sample_rate: int,
        facts: dict,
        companions: dict[Path, dict | bytes] | None = None,
    ) -> list[Path]:
        """A WAV, its sidecar (``engine.sidecar``: the facts, also in the WAV's INFO chunk) and ``companions``
        (files that describe it: a dict is written as JSON, bytes as they are), written in that order as one group;
        the paths they were written to."""
        sidecar = Sidecar.new(path.name, len(audio), sample_rate, facts)
        group = [
            (path, wav_bytes(audio, sample_rate, sidecar.wav_info())),
            (path.with_suffix(".json"), sidecar.json_bytes()),
        ]
        group += [
            (companion, data if isinstance(data, bytes) else _json_bytes(data))
            for companion, data in (companions or {}).items()
        ]
        return self._put(group)

    def json(self, path: Path, data: dict, indent: int = 1) -> Path:
        return self._put([(path, _json_bytes(data, indent))])[0]

    def _put(self, group: list[tuple[Path, bytes]]) -> list[Path]:
        written: list[Path] = []
        try:
            for path, data in group:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, data, replace=self.replace)
                written.append(path)
            return written
        except FileExistsError:
            _remove(written)
            raise  # a name taken is a bug of the naming, not a full disk: never hidden
        except OSError as error:
            # a re-run replacing the user's own names has already replaced some of them: the rest are stale
            _remove([path for path, _ in group] if self.replace else written)
            explained = explain_write_error(error, path.parent, kept=self.fallback is not None)
            if self.fallback is None:
                raise explained from error
            self.note_unsaved(str(explained))
        targets = []
        for path, data in group:
            target = self.fallback / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data, replace=self.replace)
            targets.append(target)
        return targets


def _json_bytes(data: dict, indent: int = 1) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=indent).encode("utf-8")


def _remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:  # gone already, or the folder refuses even that: nothing more to undo
            pass
