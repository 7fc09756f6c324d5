"""Saving finished audio: ``outputs/YYYYmmdd-HHMMSS-<short id>.wav`` plus a JSON sidecar.

Both files are written atomically (temporary file in the same folder, fsync, rename), the facts of
the job are also stored in the WAV's LIST/INFO chunk (ICMT holds them as JSON), and a name is
claimed with O_EXCL so two jobs finishing in the same second never overwrite each other.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.sound.wav import wav_bytes

SOFTWARE = "cosyvoice-mac"
SHORT_ID_CHARS = 8
TITLE_CHARS = 200

# errno -> (what happened, what to do about it)
_REASONS = {
    errno.ENOSPC: ("the disk is full", "Free some disk space or choose another outputs folder"),
    errno.EDQUOT: ("the disk quota is used up", "Delete some of your files or choose another outputs folder"),
    errno.EROFS: ("the folder is on a read-only disk", "Choose an outputs folder on a writable disk"),
    errno.EACCES: ("permission denied", "Give yourself write permission on the folder or choose another one"),
    errno.EPERM: ("permission denied", "Give yourself write permission on the folder or choose another one"),
    errno.ENOTDIR: ("a file stands where the folder should be", "Move that file away or choose another folder"),
}


class OutputWriteError(OSError):
    """The result could not be saved; the message says why and what to do."""


@dataclass(frozen=True)
class OutputFiles:
    wav_path: Path
    sidecar_path: Path


def output_stem(job_id: str, now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<first 8 characters of the job id>`` in local time."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{job_id[:SHORT_ID_CHARS]}"


def write_output(
    outputs_dir: str | Path,
    job_id: str,
    audio: np.ndarray,
    sample_rate: int,
    facts: dict,
    now: float | None = None,
) -> OutputFiles:
    """Save ``audio`` and ``facts`` (JSON-serialisable) as a WAV + sidecar pair; return their paths.

    Raises OutputWriteError (disk full, read-only folder, ...) with a message for the user.
    """
    folder = Path(outputs_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        wav_path = _claim_name(folder, output_stem(job_id, now))
    except OSError as error:
        raise _explain(error, folder) from error
    created = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() if now is None else now))
    sidecar = {
        "file": wav_path.name,
        "created": created,
        "sample_rate": sample_rate,
        "duration_s": round(len(audio) / sample_rate, 3),
        **facts,
    }
    info = {
        "INAM": str(facts.get("text", ""))[:TITLE_CHARS],
        "ISFT": f"{SOFTWARE} ({facts.get('model', 'unknown model')})",
        "ICRD": created,
        "ICMT": json.dumps(sidecar, ensure_ascii=False, sort_keys=True),
    }
    sidecar_path = wav_path.with_suffix(".json")
    try:
        atomic_write(wav_path, wav_bytes(audio, sample_rate, info))
        atomic_write(sidecar_path, json.dumps(sidecar, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8"))
    except OSError as error:
        for leftover in (wav_path, sidecar_path):
            _remove_quietly(leftover)
        raise _explain(error, folder) from error
    return OutputFiles(wav_path=wav_path, sidecar_path=sidecar_path)


def _claim_name(folder: Path, stem: str) -> Path:
    """Create an empty ``<stem>.wav`` exclusively (adding -2, -3, ... if taken) and return it."""
    for attempt in range(1, 1000):
        path = folder / (f"{stem}.wav" if attempt == 1 else f"{stem}-{attempt}.wav")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        if path.with_suffix(".json").exists():
            _remove_quietly(path)
            continue
        return path
    raise FileExistsError(errno.EEXIST, f"no free output name for {stem} in {folder}")


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _explain(error: OSError, folder: Path) -> OutputWriteError:
    reason, advice = _REASONS.get(error.errno, (error.strerror or str(error), "Choose another outputs folder"))
    explained = OutputWriteError(
        f"could not save the result in {folder}: {reason}. {advice}; the audio is still available to play and download."
    )
    explained.errno = error.errno
    return explained
