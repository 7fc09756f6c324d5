"""Named voices: each name points at a cached prompt (model id + audio content hash), with its transcript and a
copy of its recording. Torch-free: the UI process, the API and the CLI use it without a model.

Layout under the user cache folder (``user_cache_dir()``)::

    voices/voices.json                                        name -> audio hash, model id, transcript
    voices/voices.json.bak                                    a copy of the index as last written
    voices/voices.json.unreadable-<time>                      a damaged index, set aside (never overwritten)
    voices/voices.json.bak.unreadable-<time>                  a damaged backup, set aside with it (the same time)
    voices/<file>                                             a copy of each named voice's prompt audio
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import NamedTuple

from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.preview.labels import PREVIEW
from cosyvoice_mac.stored import Field, Unreadable, read_json, typed_records

_HASH_PATTERN = re.compile(r"[A-Za-z0-9_-]{8,128}")
MAX_VOICE_NAME = 64
UNREADABLE_SUFFIX = ".unreadable-"
BIDI_CONTROLS = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def check_audio_hash(audio_hash: str) -> str:
    """``audio_hash`` itself when it is a content hash (it names files: nothing else may pass)."""
    if not isinstance(audio_hash, str) or not _HASH_PATTERN.fullmatch(audio_hash):
        raise ValueError(f"audio hash {audio_hash!r} is not a content hash")
    return audio_hash


def _bare_name(name: str) -> bool:
    return bool(name) and Path(name).name == name and name not in (".", "..") and "\\" not in name


# One saved voice as the index holds it. A voice without a usable hash is skipped (with a note; it stays in the
# file), a wrong-typed optional field reads as its default; the name is always the index's key.
VOICE_SHAPE = {
    "audio_hash": Field(("text",), required=True, rule=_HASH_PATTERN.fullmatch, rule_says="a content hash"),
    "model_id": Field(("text", "null")),
    "transcript": Field(("text", "null")),
    "created": Field(("number", "null"), rule=lambda seconds: 0 <= seconds < 1e11, rule_says="a time"),
    "audio_file": Field(("text", "null"), rule=_bare_name, rule_says="a file name in the voices folder"),
}


class VoiceError(EngineError):
    """A named-voice request that cannot be done (unknown name, name taken, bad name); ``field`` names the part
    of the voice at fault (a door's parameter: ``name``, ``transcript`` or ``audio``)."""

    field = "name"


class VoiceExists(VoiceError):
    """The name is taken by another saved voice (the API answers it with a 409, not a 400)."""


class VoiceTranscriptRefused(VoiceError):
    """The transcript breaks the request contract's rule (``request.check_transcript``): a voice saved with it
    could never speak."""

    field = "transcript"


class VoiceAudioRefused(VoiceError):
    """The recording is no usable voice prompt (``judge_voice_audio``): ``problem`` and ``details`` as the
    check's, the message its sentence. A voice every later job would refuse is never saved."""

    field = "audio"

    def __init__(self, check):
        super().__init__(check.sentence)
        self.problem, self.details = check.problem, check.details


def judge_voice_audio(audio: str | Path | None = None, samples=None, sample_rate: int | None = None):
    """The one check of a recording as a voice (``sound.prompt_check.PromptCheck``; None when there is no
    recording): the prompt check the page, the API and the CLI show, then the speech detector's ear, the same
    that refuses a recording to convert (``frontend.vad.too_little_speech``): a pure tone or music passes the
    first (it has sound and length) but is no one speaking, and is refused as ``not_speech``."""
    from cosyvoice_mac.sound.prompt_check import checked_prompt, judge_samples

    if audio is not None:
        try:
            stat = os.stat(audio)
        except OSError:
            return checked_prompt(audio)  # it explains the missing file
        return _judged_file(str(audio), stat.st_size, stat.st_mtime_ns)
    if samples is None or not sample_rate:
        return None
    return _heard(judge_samples(samples, int(sample_rate), "the recording"), samples, int(sample_rate), "the recording")


@functools.lru_cache(maxsize=64)
def _judged_file(path: str, size: int, modified_ns: int):
    """``judge_voice_audio`` of one file version: the door's check answers the library's save too, so a
    recording is heard once."""
    from cosyvoice_mac.sound.prompt_check import checked_prompt
    from cosyvoice_mac.sound.read import read_audio

    check = checked_prompt(path)
    if not check.ok:
        return check
    return _heard(check, *read_audio(path), Path(path).name)


def _heard(check, samples, sample_rate: int, name: str):
    """``check`` itself when it failed or the speech detector hears someone speaking; else ``not_speech``."""
    from cosyvoice_mac.frontend import vad  # numpy and onnxruntime: only when a recording is judged
    from cosyvoice_mac.sound.prompt_check import PromptCheck

    if not check.ok:
        return check
    try:
        heard = vad.hears_speech(samples, sample_rate)
    except vad.VadUnavailable as error:
        raise VoiceError(f"the recording cannot be checked for speech: {error}") from error
    if not heard:
        return PromptCheck(check.seconds, check.speech_seconds, "not_speech", {"name": name})
    return check


def check_voice_audio(audio: str | Path | None = None, samples=None, sample_rate: int | None = None) -> None:
    """VoiceAudioRefused unless the recording ``audio`` (a file) or ``samples`` at ``sample_rate`` passes
    ``judge_voice_audio``: every door that saves a voice ends here."""
    check = judge_voice_audio(audio, samples, sample_rate)
    if check is not None and not check.ok:
        raise VoiceAudioRefused(check)


def check_transcript(transcript: str | None) -> str | None:
    """``transcript`` stripped (None when blank); VoiceTranscriptRefused when the request contract would refuse
    it in every job (too long, control characters)."""
    from cosyvoice_mac.request import check_transcript as contract_rule

    if transcript is None:
        return None
    if not isinstance(transcript, str):
        raise VoiceTranscriptRefused(f"the transcript must be text, not {type(transcript).__name__}")
    transcript = transcript.strip() or None
    if transcript is not None:
        try:
            contract_rule(transcript)
        except RequestError as error:
            raise VoiceTranscriptRefused(str(error)) from None
    return transcript


class VoiceLibrary:
    """Owns the user's named voices: each name points at a cached prompt (model id + audio hash)
    and, when given, a copy of the prompt audio so the voice outlives a cache purge."""

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
    ) -> dict:
        """Name a cached prompt. ``audio`` (a file) or ``audio_samples`` + ``sample_rate`` keep a copy, once
        they pass the prompt check (VoiceAudioRefused: a voice no job could use is not saved)."""
        name = self.check_name(name)
        transcript = check_transcript(transcript)
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
            }
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
            self._forget_audio(entry.get("audio_file"), {**index.skipped, **entries})

    def _forget_audio(self, audio_file: str | None, entries: dict[str, object]) -> None:
        """Remove a recording no remaining voice (a skipped one included) points at."""
        if audio_file and not any(
            isinstance(other, dict) and other.get("audio_file") == audio_file for other in entries.values()
        ):
            (self.folder / audio_file).unlink(missing_ok=True)

    @staticmethod
    def check_name(name: str) -> str:
        """``name`` stripped; VoiceError unless it is 1-MAX_VOICE_NAME printable characters."""
        if not isinstance(name, str) or not name.strip():
            raise VoiceError("a voice needs a name")
        name = name.strip()
        if len(name) > MAX_VOICE_NAME or any(ord(char) < 32 or 0x7F <= ord(char) < 0xA0 for char in name):
            raise VoiceError(f"voice names are 1-{MAX_VOICE_NAME} printable characters; {name[:80]!r} is not")
        if any(char in BIDI_CONTROLS for char in name):  # they reorder what is shown around the name
            raise VoiceError(
                f"voice names cannot hold text-direction control characters (U+202A-U+202E, "
                f"U+2066-U+2069); {name[:80]!r} does"
            )
        if name.casefold() == PREVIEW:  # the built-in voice answers to it: a saved one would be shadowed
            raise VoiceError(f"{name!r} is the built-in preview voice's name; pick another name")
        return name

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


class _Index(NamedTuple):
    """The voice list as read: the usable voices by name, the voices skipped (as written) and why."""

    voices: dict[str, dict]
    skipped: dict[str, object]
    notes: list[str]


class _Damaged(ValueError):
    """A voice list file that exists but is not valid JSON of the expected shape."""
