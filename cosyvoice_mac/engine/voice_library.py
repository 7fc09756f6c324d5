"""Named voices: each name points at a cached prompt (model id + audio content hash), with its transcript and a
copy of its recording, and may hold more recordings, one per style (happy, whisper, outdoor, ...: one lowercase
word, ``style_names``).
The rule every recording passes is ``voice_rules.py``'s; carrying voices to another machine is
``voice_transfer.py``'s. Torch-free: the UI process, the API and the CLI use it without a model.

Layout under the user cache folder (``user_cache_dir()``)::

    voices/voices.json                                        name -> audio hash, model id, transcript, style,
                                                              and ``styles``: style -> another recording's facts
    voices/voices.json.bak                                    a copy of the index as last written
    voices/voices.json.unreadable-<time>                      a damaged index, set aside (never overwritten)
    voices/voices.json.bak.unreadable-<time>                  a damaged backup, set aside with it (the same time)
    voices/<file>                                             a copy of each named voice's prompt audio
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path
from typing import NamedTuple

from cosyvoice_mac.engine.voice_rules import (
    DEFAULT_STYLE,
    VoiceAudioRefused,
    VoiceError,
    VoiceExists,
    VoiceTranscriptRefused,
    check_audio_hash,
    check_style,
    check_transcript,
    check_voice_audio,
    check_voice_name,
    judge_voice_audio,
)
from cosyvoice_mac.engine.voice_styles import RECORDING_SHAPE, VoiceStyles
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.stored import Field, Unreadable, read_json, typed_records

UNREADABLE_SUFFIX = ".unreadable-"
# Where the rules now live; kept importable from here, where every door has always found them.
__all__ = [
    "VoiceAudioRefused",
    "VoiceError",
    "VoiceExists",
    "VoiceLibrary",
    "VoiceTranscriptRefused",
    "check_audio_hash",
    "check_transcript",
    "check_voice_audio",
    "judge_voice_audio",
]


# One saved voice as the index holds it. A voice without a usable hash is skipped (with a note; it stays in the
# file), a wrong-typed optional field reads as its default; the name is always the index's key.
VOICE_SHAPE = {
    **RECORDING_SHAPE,
    "style": Field(("text", "null")),  # the style of the voice's own recording (None: DEFAULT_STYLE)
    "styles": Field(("object", "null")),  # style -> RECORDING_SHAPE: the voice's other recordings
}


class VoiceLibrary(VoiceStyles):
    """Owns the user's named voices: each name points at a cached prompt (model id + audio hash)
    and, when given, a copy of the prompt audio so the voice outlives a cache purge; a voice's other
    recordings, one per style, are :class:`~cosyvoice_mac.engine.voice_styles.VoiceStyles`'s methods."""

    check_name = staticmethod(check_voice_name)

    def __init__(self, root: str | Path | None = None):
        self.folder = (Path(root) if root is not None else user_cache_dir()) / "voices"
        self.index_path = self.folder / "voices.json"
        self.backup_path = self.folder / "voices.json.bak"  # the index as this library last wrote it
        self._lock = threading.Lock()

    def list(self) -> list[dict]:
        """Every saved voice (name, audio_hash, model_id, transcript, created, audio_file), by name."""
        return [dict(entry) for _, entry in sorted(self._load().items(), key=lambda item: item[0].lower())]

    def get(self, name: str) -> dict:
        entries = self._load()
        if name not in entries:
            known = ", ".join(sorted(entries)) or "none saved yet"
            raise VoiceError(f"there is no saved voice named {name!r} (known: {known})")
        entry = dict(entries[name])
        if entry.get("audio_file"):
            entry["audio_path"] = str(self.folder / entry["audio_file"])
        return entry

    def save(
        self,
        name: str,
        *,
        audio_hash: str,
        model_id: str,
        transcript: str | None = None,
        audio: str | Path | None = None,
        audio_samples=None,
        sample_rate: int | None = None,
        overwrite: bool = False,
        style: str | None = None,
    ) -> dict:
        """Name a cached prompt. ``audio`` (a file) or ``audio_samples`` + ``sample_rate`` keep a copy, once
        they pass the prompt check (VoiceAudioRefused: a voice no job could use is not saved). ``style``:
        the recording's style (None: DEFAULT_STYLE, or the replaced voice's); a replaced voice keeps its
        other styles' recordings."""
        name = self.check_name(name)
        transcript = check_transcript(transcript)
        style = check_style(style) if style is not None else None
        check_audio_hash(audio_hash)
        check_voice_audio(audio, audio_samples, sample_rate)
        with self._lock:
            index = self._read()
            entries = index.voices
            if (name in entries or name in index.skipped) and not overwrite:
                raise VoiceExists(f"a voice named {name!r} already exists; pick another name or replace it")
            self.folder.mkdir(parents=True, exist_ok=True)
            audio_file = self._store_audio(audio_hash, audio, audio_samples, sample_rate)
            replaced = entries.get(name)
            entry = {
                "name": name,
                "audio_hash": audio_hash,
                "model_id": model_id,
                "transcript": transcript,
                "created": time.time(),
                "audio_file": audio_file,
                "style": style or (replaced or {}).get("style") or DEFAULT_STYLE,
                "styles": (replaced or {}).get("styles") or {},
            }
            if entry["style"] in entry["styles"]:
                raise VoiceExists(f"the voice {name!r} has another recording of the style {entry['style']!r}")
            entries[name] = entry
            self._store(entries, index.skipped)
            if replaced is not None:
                self._forget_audio(replaced.get("audio_file"), {**index.skipped, **entries})
        return dict(entry)

    def rename(self, old: str, new: str) -> dict:
        new = self.check_name(new)
        with self._lock:
            index = self._read()
            entries = index.voices
            if old not in entries:
                raise VoiceError(f"there is no saved voice named {old!r}")
            if (new in entries or new in index.skipped) and new != old:
                raise VoiceExists(f"a voice named {new!r} already exists")
            entry = entries.pop(old)
            entry["name"] = new
            entries[new] = entry
            self._store(entries, index.skipped)
        return dict(entry)

    def set_transcript(self, name: str, transcript: str | None) -> dict:
        """Change what the voice's recording is said to say (None or blank: no transcript, cross-lingual only)."""
        transcript = check_transcript(transcript)
        with self._lock:
            index = self._read()
            entries = index.voices
            if name not in entries:
                raise VoiceError(f"there is no saved voice named {name!r}")
            entries[name]["transcript"] = transcript
            self._store(entries, index.skipped)
            return dict(entries[name])

    def delete(self, name: str) -> None:
        with self._lock:
            index = self._read()
            entries = index.voices
            if name not in entries:
                raise VoiceError(f"there is no saved voice named {name!r}")
            entry = entries.pop(name)
            self._store(entries, index.skipped)
            for recording in [entry, *_style_records(entry)]:
                self._forget_audio(recording.get("audio_file"), {**index.skipped, **entries})

    def _forget_audio(self, audio_file: str | None, entries: dict[str, object]) -> None:
        """Remove a recording no remaining voice (a skipped one included), nor any of its styles, points at."""
        if audio_file and not any(
            recording.get("audio_file") == audio_file
            for other in entries.values()
            if isinstance(other, dict)
            for recording in [other, *_style_records(other)]
        ):
            (self.folder / audio_file).unlink(missing_ok=True)

    def _store_audio(self, audio_hash, audio, audio_samples, sample_rate) -> str | None:
        if audio is not None:
            source = Path(audio)
            target = f"{audio_hash}{source.suffix.lower() or '.wav'}"
            if not (self.folder / target).exists():
                atomic_write(self.folder / target, source.read_bytes())  # a prompt is 20 MB at most
            return target
        if audio_samples is not None:
            import soundfile

            if not sample_rate:
                raise VoiceError("audio samples need their sample rate")
            target = f"{audio_hash}.wav"
            encoded = io.BytesIO()
            soundfile.write(encoded, audio_samples, sample_rate, subtype="FLOAT", format="WAV")
            atomic_write(self.folder / target, encoded.getvalue())
            return target
        return None

    def problem(self) -> str | None:
        """What the user must know about the voice list, or None: a damaged list that was set aside, and
        whether its backup restored the voices or was damaged too (then both copies were set aside).

        Read from the folder (the set-aside files), so every process sees it; it goes away when the user
        deletes the set-aside index file.
        """
        try:
            index = self._read()
        except VoiceError as error:
            return str(error)
        aside = sorted(self.folder.glob(f"{self.index_path.name}{UNREADABLE_SUFFIX}*"))
        if not aside:
            return self._skipped_note(index)
        index_aside = aside[-1]
        backup_aside = self.folder / index_aside.name.replace(self.index_path.name, self.backup_path.name, 1)
        if backup_aside.is_file():
            return (
                f"the saved-voice list {self.index_path} and its backup {self.backup_path.name} could not be "
                f"read, so the list starts empty; neither copy was deleted: they were set aside as "
                f"{index_aside.name} and {backup_aside.name} in {self.folder} (voice names and transcripts can "
                f"be recovered from them by hand). Save the voices again; delete {index_aside} to dismiss this note"
            )
        kept = (
            f"the voices as last saved were restored from {self.backup_path.name}"
            if self.backup_path.is_file()
            else "there was no earlier copy, so the list starts empty"
        )
        return (
            f"the saved-voice list {self.index_path} could not be read, so it was set aside as "
            f"{index_aside.name} (never overwritten; voice names can be recovered from it by hand); {kept}. "
            f"Delete {index_aside} to dismiss this note"
        )

    def _skipped_note(self, index: _Index) -> str | None:
        if not index.skipped:
            return None
        names = ", ".join(repr(name[:40]) for name in list(index.skipped)[:5])
        return (
            f"{len(index.skipped)} saved voice(s) in {self.index_path} could not be read and are left out ({names}; "
            f"first problem: {index.notes[0]}); they stay in the file as written, for recovery by hand"
        )

    def _load(self) -> dict[str, dict]:
        """The index's readable voices (VOICE_SHAPE), by name; see :meth:`_read`."""
        return self._read().voices

    def _read(self) -> _Index:
        """The index as read. A damaged index (not JSON, no list of voices) is set aside and the last good copy
        (if any) takes its place; a bad voice in a good index is only skipped (kept in the file, noted)."""
        try:
            return self._parse(self.index_path)
        except FileNotFoundError:
            return _Index({}, {}, [])
        except _Damaged:
            pass
        except OSError as error:
            raise VoiceError(
                f"the voice list {self.index_path} cannot be read ({error}); check the folder's permissions"
            ) from error
        stamp = self._set_aside(self.index_path)
        try:
            entries = self._parse(self.backup_path)
        except _Damaged:  # both copies: keep the backup too, beside the index, under the same time
            if stamp is not None:
                self._set_aside(self.backup_path, stamp)
            return _Index({}, {}, [])
        except OSError:
            return _Index({}, {}, [])
        try:
            atomic_write(self.index_path, self.backup_path.read_bytes())
        except OSError:  # a read-only folder: keep serving the copy
            pass
        return entries

    @staticmethod
    def _parse(path: Path) -> _Index:
        """Raises FileNotFoundError / OSError, or _Damaged when the file is not a voice list."""
        try:
            data = read_json(path)
        except Unreadable as error:
            raise _Damaged(str(error)) from error
        voices = data.get("voices") if isinstance(data, dict) else None
        if not isinstance(voices, dict):
            raise _Damaged("not a voice list")
        good, notes = typed_records(voices, VOICE_SHAPE, f"the saved-voice list {path}")
        for name in list(good):
            try:
                good[name]["name"] = VoiceLibrary.check_name(name)
            except VoiceError as error:
                notes.append(f"the saved-voice list {path}, {name[:80]!r}: {error}; skipped")
                del good[name]
        return _Index(good, {name: entry for name, entry in voices.items() if name not in good}, notes)

    def _set_aside(self, path: Path, stamp: str | None = None) -> str | None:
        """Rename the damaged ``path`` to a new ``<name>.unreadable-<stamp>`` name, never over another file;
        the stamp used (None when another process set it aside first)."""
        stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(100):
            tried = f"{stamp}-{attempt}" if attempt else stamp
            target = self.folder / f"{path.name}{UNREADABLE_SUFFIX}{tried}"
            try:
                os.link(path, target)  # fails if the name is taken: nothing is overwritten
            except FileExistsError:
                continue
            except FileNotFoundError:  # another process set it aside first
                return None
            except OSError as error:
                raise VoiceError(
                    f"the voice list {path} is damaged and could not be set aside ({error}); move it away by hand"
                ) from error
            path.unlink(missing_ok=True)
            return tried
        return None

    def _store(self, entries: dict[str, dict], skipped: dict | None = None) -> None:
        """Write the index atomically, then the same bytes as the backup: the last good version, should
        anything damage the index later. ``skipped``: the voices read as unusable, written back as they were
        (a voice saved since under one of their names replaces it)."""
        voices = {**(skipped or {}), **entries}
        payload = json.dumps({"format": 1, "voices": voices}, ensure_ascii=False, indent=1).encode("utf-8")
        atomic_write(self.index_path, payload)
        try:
            atomic_write(self.backup_path, payload)
        except OSError:  # the index itself was written; the next change tries the backup again
            pass


def _style_records(entry: dict) -> list[dict]:
    """The records of a voice's other recordings as written (any that is a record), for its files."""
    styles = entry.get("styles")
    return [record for record in styles.values() if isinstance(record, dict)] if isinstance(styles, dict) else []


class _Index(NamedTuple):
    """The voice list as read: the usable voices by name, the voices skipped (as written) and why."""

    voices: dict[str, dict]
    skipped: dict[str, object]
    notes: list[str]


class _Damaged(ValueError):
    """A voice list file that exists but is not valid JSON of the expected shape."""
