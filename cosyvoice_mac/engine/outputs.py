"""Saving finished audio: ``outputs/YYYYmmdd-HHMMSS-<short id>.wav`` plus a JSON sidecar (``sidecar.Sidecar``).

Both files are written atomically (temporary file in the same folder, fsync, rename), the facts of
the job are also stored in the WAV's LIST/INFO chunk (ICMT holds them as JSON), the WAV carries content
credentials (``provenance``: signed, saying it is AI-generated and what made it) unless they are turned off,
and the WAV is put in place only where no file has that name (``atomic_write(replace=False)``), so two jobs
never overwrite each other and a half-written WAV is never visible.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosyvoice_mac.engine.sidecar import Sidecar, read_sidecar
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.provenance import MEDIA_TYPES, with_credentials
from cosyvoice_mac.provenance.claim import utc_time
from cosyvoice_mac.sound.wav import wav_bytes

SHORT_ID_CHARS = 8
MAX_NAME_ATTEMPTS = 999  # <stem>.wav, <stem>-2.wav, ... when a name is taken

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
    unsigned: str | None = None  # why the WAV was saved without its content credentials (None: signed, or off)


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
    now = time.time() if now is None else now
    stem = output_stem(job_id, now)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, MAX_NAME_ATTEMPTS + 1):
            wav_path = folder / (f"{stem}.wav" if attempt == 1 else f"{stem}-{attempt}.wav")
            sidecar_path = wav_path.with_suffix(".json")
            if sidecar_path.exists():
                continue
            sidecar = Sidecar.new(wav_path.name, len(audio), sample_rate, facts, now)
            wav = wav_bytes(audio, sample_rate, sidecar.wav_info())
            wav, unsigned = with_credentials(wav, MEDIA_TYPES["wav"], facts, wav_path.name, utc_time(now))
            try:
                atomic_write(wav_path, wav, replace=False)
            except FileExistsError:
                continue
            try:
                atomic_write(sidecar_path, sidecar.json_bytes())
            except OSError:
                _remove_quietly(wav_path)
                raise
            return OutputFiles(wav_path=wav_path, sidecar_path=sidecar_path, unsigned=unsigned)
        raise FileExistsError(errno.EEXIST, f"no free output name for {stem} in {folder.name}/")
    except OSError as error:
        raise explain_write_error(error, folder) from error


def credential_facts(result) -> dict:
    """What a finished job's content credentials say (``result``: a JobResult): its saved sidecar's facts, else
    (outputs/ refused the file) what the result itself knows of what made it."""
    saved = read_sidecar(result.sidecar_path) if result.sidecar_path else None
    if saved is not None:
        return saved.recorded
    known = {"model": result.model, "mode": result.mode, "prompt_hash": result.prompt_hash}
    return {**known, "source_hash": result.source_hash, "file": f"{result.job_id[:SHORT_ID_CHARS]}.wav"}


def signed_wav(result, name: str) -> bytes:
    """The audio of a result outputs/ refused (``result.audio``) as the bytes of a WAV called ``name`` with its
    content credentials (as they are when credentials are off or signing fails: the sound is never withheld)."""
    data, _ = with_credentials(
        wav_bytes(result.samples(), result.sample_rate), MEDIA_TYPES["wav"], credential_facts(result), name
    )
    return data


def unsaved_copy(result, folder: Path) -> Path:
    """:func:`signed_wav` of a result outputs/ refused, in ``folder`` (a front end's temporary folder, which its
    janitor sweeps), so the user still gets the sound."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.job_id}.wav"
    atomic_write(path, signed_wav(result, path.name))
    return path


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def explain_write_error(error: OSError, folder: Path, kept: bool = True) -> OutputWriteError:
    """``error`` (from writing in ``folder``) as an OutputWriteError saying what happened and what to do, and
    whether the audio is ``kept`` all the same. The folder is named by its name only: the message reaches
    clients of a server, who have no business knowing where its files live."""
    reason, advice = _REASONS.get(error.errno, (error.strerror or str(error), "Choose another outputs folder"))
    after = "the audio is still available to play and download" if kept else "nothing was saved"
    explained = OutputWriteError(f"could not save the result in {Path(folder).name}/: {reason}. {advice}; {after}.")
    explained.errno = error.errno
    return explained
