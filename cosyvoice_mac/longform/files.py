"""Where a long job's files go, and what is said when they cannot go there.

A result in outputs/ is named by :func:`result_stem`: the time and the long job's own id (fresh for each job,
never reused), so two jobs started in the same second keep apart; and every file is written whole and never
over an existing one (``atomic_write(replace=False)``), unless the name is the user's own (a command's
``--out``, or a batch's folder, which a re-run resumes). Every WAV carries content credentials
(``provenance``) unless they are turned off.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from cosyvoice_mac.engine.jobs import new_job_id
from cosyvoice_mac.engine.outputs import explain_write_error
from cosyvoice_mac.engine.sidecar import Sidecar, read_sidecar
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.provenance import MEDIA_TYPES, with_credentials
from cosyvoice_mac.sound.wav import wav_bytes

STEM_ID_CHARS = 12  # of the long job's id: 48 random bits, so no two jobs ever share a name
MADE_BY = ("model", "version", "engine")  # what a line's sidecar says made it, for a long job's credentials


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
        self.unsigned: str | None = None  # the first reason a WAV was saved without its content credentials
        self.made_by: dict = {}  # the lines' model, version, engine and voices' hashes (``note_line``)

    def note_line(self, facts: dict) -> None:
        """Remember what made a line whose ``facts`` (``longform.speakers``) name its saved file: the model,
        version and engine of its sidecar, and its voice's hash, for the content credentials of the files
        that join the lines (a dialogue, a dub)."""
        made = _made_by(facts)
        for key in MADE_BY:
            if made.get(key):
                self.made_by.setdefault(key, made[key])
        hashes = self.made_by.setdefault("voice_hashes", [])
        listed = made.get("voice_hashes") if isinstance(made.get("voice_hashes"), list) else []
        for voice_hash in [made.get("prompt_hash"), *listed]:  # and the recordings its style tags spoke with
            if isinstance(voice_hash, str) and voice_hash not in hashes:
                hashes.append(voice_hash)

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
        """A WAV (with its content credentials), its sidecar (``engine.sidecar``: the facts, also in the WAV's
        INFO chunk) and ``companions`` (files that describe it: a dict is written as JSON, bytes as they are),
        written in that order as one group; the paths they were written to."""
        sidecar = Sidecar.new(path.name, len(audio), sample_rate, facts)
        made_by = {**self.made_by, **_made_by(facts), **facts}
        wav, unsigned = with_credentials(
            wav_bytes(audio, sample_rate, sidecar.wav_info()), MEDIA_TYPES["wav"], made_by, path.name
        )
        self.unsigned = self.unsigned or unsigned
        group = [
            (path, wav),
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


def _made_by(facts: dict) -> dict:
    """The facts recorded in the sidecar of the line ``facts["line_output"]`` names (empty when none)."""
    line_output = facts.get("line_output")
    found = read_sidecar(Path(line_output).with_suffix(".json")) if isinstance(line_output, str) else None
    return found.recorded if found is not None else {}


def _json_bytes(data: dict, indent: int = 1) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=indent).encode("utf-8")


def _remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:  # gone already, or the folder refuses even that: nothing more to undo
            pass
