"""Speaker cache (prompt features keyed by model id + audio content hash) and named voices.

Layout under the user cache folder (``user_cache_dir()``)::

    speakers/v<FORMAT>/<model key>/<audio hash>.safetensors   tensors: speech_tokens, mel, embedding
    speakers/v<FORMAT>/<model key>/<audio hash>.json          facts; written last, so it marks a complete entry
    voices/voices.json                                        name -> audio hash, model id, transcript
    voices/voices.json.bak                                    a copy of the index as last written
    voices/voices.json.unreadable-<time>                      a damaged index, set aside (never overwritten)
    voices/<file>                                             a copy of each named voice's prompt audio

A change of CACHE_FORMAT moves entries to a new folder and deletes the old ones, so stale features
are never read. torch is imported only by the methods that handle tensors: the UI process can use
VoiceLibrary without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.outputs import atomic_write_bytes
from cosyvoice_mac.paths import user_cache_dir  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from cosyvoice_mac.pipeline.types import SpeakerPrompt

CACHE_FORMAT = 1
TENSOR_NAMES = ("speech_tokens", "mel", "embedding")
_HASH_PATTERN = re.compile(r"[A-Za-z0-9_-]{8,128}")
MAX_VOICE_NAME = 64
UNREADABLE_SUFFIX = ".unreadable-"
BIDI_CONTROLS = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def _model_key(model_id: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)[:48]
    return f"{readable}-{hashlib.sha256(model_id.encode()).hexdigest()[:8]}"


def _check_hash(audio_hash: str) -> str:
    if not isinstance(audio_hash, str) or not _HASH_PATTERN.fullmatch(audio_hash):
        raise ValueError(f"audio hash {audio_hash!r} is not a content hash")
    return audio_hash


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        lookups = self.memory_hits + self.disk_hits + self.misses
        return (self.memory_hits + self.disk_hits) / lookups if lookups else 0.0

    def as_dict(self) -> dict:
        return {
            "memory_hits": self.memory_hits,
            "disk_hits": self.disk_hits,
            "misses": self.misses,
            "hit_rate": round(self.hit_rate, 4),
        }


class SpeakerCache:
    """Owns cached SpeakerPrompts: an in-memory LRU of ``memory_entries`` in front of the disk store.

    Tensors are kept on the CPU; a disk that cannot be written only costs the on-disk copy.
    """

    def __init__(self, root: str | Path | None = None, memory_entries: int = 16):
        self.root = Path(root) if root is not None else user_cache_dir()
        self.folder = self.root / "speakers" / f"v{CACHE_FORMAT}"
        self.memory_entries = max(0, memory_entries)
        self._memory: OrderedDict[tuple[str, str], SpeakerPrompt] = OrderedDict()
        self.stats = CacheStats()
        self.last_disk_error: str | None = None
        self._drop_old_formats()

    def paths(self, model_id: str, audio_hash: str) -> tuple[Path, Path]:
        stem = self.folder / _model_key(model_id) / _check_hash(audio_hash)
        return stem.with_suffix(".safetensors"), stem.with_suffix(".json")

    def lookup(self, model_id: str, audio_hash: str) -> tuple[SpeakerPrompt | None, str]:
        """(prompt, "memory" | "disk") on a hit, (None, "miss") otherwise; counts the outcome."""
        key = (model_id, audio_hash)
        if key in self._memory:
            self._memory.move_to_end(key)
            self.stats.memory_hits += 1
            return self._memory[key], "memory"
        prompt = self._read(model_id, audio_hash)
        if prompt is None:
            self.stats.misses += 1
            return None, "miss"
        self.stats.disk_hits += 1
        self._remember(prompt)
        return prompt, "disk"

    def get_or_extract(
        self,
        model_id: str,
        audio_hash: str,
        extract: Callable[[], SpeakerPrompt],
        transcript: str | None = None,
    ) -> tuple[SpeakerPrompt, str]:
        """The cached prompt for (model_id, audio_hash), or ``extract()``'s, stored for next time.

        Returns (prompt, source) with source "memory", "disk" or "extracted"; the prompt carries
        ``transcript`` (a hit with another transcript reuses the features with the new text).
        """
        prompt, source = self.lookup(model_id, audio_hash)
        if prompt is None:
            prompt, source = extract(), "extracted"
            prompt = replace(prompt, audio_hash=audio_hash, model_id=model_id)
            self.put(prompt)
        return (prompt if prompt.transcript == transcript else replace(prompt, transcript=transcript)), source

    def put(self, prompt: SpeakerPrompt) -> bool:
        """Keep ``prompt`` (its tensors moved to the CPU) in memory and on disk; False if the disk refused."""
        prompt = replace(
            prompt, **{name: getattr(prompt, name).detach().to("cpu").contiguous() for name in TENSOR_NAMES}
        )
        self._remember(prompt)
        try:
            self._write(prompt)
        except OSError as error:
            self.last_disk_error = f"speaker cache not saved to {self.folder}: {error}"
            return False
        return True

    def contains(self, model_id: str, audio_hash: str) -> bool:
        return (model_id, audio_hash) in self._memory or self.paths(model_id, audio_hash)[1].is_file()

    def clear_memory(self) -> None:
        self._memory.clear()

    def _remember(self, prompt: SpeakerPrompt) -> None:
        if self.memory_entries == 0:
            return
        self._memory[(prompt.model_id, prompt.audio_hash)] = prompt
        self._memory.move_to_end((prompt.model_id, prompt.audio_hash))
        while len(self._memory) > self.memory_entries:
            self._memory.popitem(last=False)

    def _write(self, prompt: SpeakerPrompt) -> None:
        from safetensors.torch import save

        tensor_path, facts_path = self.paths(prompt.model_id, prompt.audio_hash)
        tensor_path.parent.mkdir(parents=True, exist_ok=True)
        facts = {
            "format": CACHE_FORMAT,
            "model_id": prompt.model_id,
            "audio_hash": prompt.audio_hash,
            "transcript": prompt.transcript,
            "duration_s": prompt.duration_s,
            "created": time.time(),
            "shapes": {name: list(getattr(prompt, name).shape) for name in TENSOR_NAMES},
        }
        metadata = {"format": str(CACHE_FORMAT), "model_id": prompt.model_id, "audio_hash": prompt.audio_hash}
        tensors = {name: getattr(prompt, name) for name in TENSOR_NAMES}
        atomic_write_bytes(tensor_path, save(tensors, metadata=metadata))
        atomic_write_bytes(facts_path, json.dumps(facts, ensure_ascii=False, indent=1).encode("utf-8"))

    def _read(self, model_id: str, audio_hash: str) -> SpeakerPrompt | None:
        from safetensors import SafetensorError
        from safetensors.torch import load

        from cosyvoice_mac.pipeline.types import SpeakerPrompt

        tensor_path, facts_path = self.paths(model_id, audio_hash)
        if not facts_path.is_file():
            return None
        try:
            facts = json.loads(facts_path.read_text(encoding="utf-8"))
            raw = tensor_path.read_bytes()
            tensors = load(raw)
            expected = {"format": CACHE_FORMAT, "model_id": model_id, "audio_hash": audio_hash}
            if any(facts.get(key) != value for key, value in expected.items()):
                raise ValueError("entry facts do not match its key")
            if set(tensors) != set(TENSOR_NAMES) or any(
                list(tensors[name].shape) != facts["shapes"][name] for name in TENSOR_NAMES
            ):
                raise ValueError("entry tensors do not match their facts")
        except (OSError, ValueError, KeyError, TypeError, SafetensorError):
            for path in (facts_path, tensor_path):  # unreadable or half-written: extract again
                path.unlink(missing_ok=True)
            return None
        return SpeakerPrompt(
            speech_tokens=tensors["speech_tokens"],
            mel=tensors["mel"],
            embedding=tensors["embedding"],
            audio_hash=audio_hash,
            model_id=model_id,
            transcript=facts.get("transcript"),
            duration_s=float(facts.get("duration_s", 0.0)),
        )

    def _drop_old_formats(self) -> None:
        parent = self.folder.parent
        if not parent.is_dir():
            return
        for child in parent.iterdir():
            if child.is_dir() and child.name.startswith("v") and child.name != self.folder.name:
                shutil.rmtree(child, ignore_errors=True)


class VoiceError(EngineError):
    """A named-voice request that cannot be done (unknown name, name taken, bad name)."""


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
        """Name a cached prompt. ``audio`` (a file) or ``audio_samples`` + ``sample_rate`` keep a copy."""
        name = self.check_name(name)
        _check_hash(audio_hash)
        with self._lock:
            entries = self._load()
            if name in entries and not overwrite:
                raise VoiceError(f"a voice named {name!r} already exists; pick another name or overwrite it")
            self.folder.mkdir(parents=True, exist_ok=True)
            audio_file = self._store_audio(audio_hash, audio, audio_samples, sample_rate)
            entry = {
                "name": name,
                "audio_hash": audio_hash,
                "model_id": model_id,
                "transcript": transcript,
                "created": time.time(),
                "audio_file": audio_file,
            }
            entries[name] = entry
            self._store(entries)
        return dict(entry)

    def rename(self, old: str, new: str) -> dict:
        new = self.check_name(new)
        with self._lock:
            entries = self._load()
            if old not in entries:
                raise VoiceError(f"there is no saved voice named {old!r}")
            if new in entries and new != old:
                raise VoiceError(f"a voice named {new!r} already exists")
            entry = entries.pop(old)
            entry["name"] = new
            entries[new] = entry
            self._store(entries)
        return dict(entry)

    def delete(self, name: str) -> None:
        with self._lock:
            entries = self._load()
            if name not in entries:
                raise VoiceError(f"there is no saved voice named {name!r}")
            entry = entries.pop(name)
            self._store(entries)
            audio_file = entry.get("audio_file")
            if audio_file and not any(other.get("audio_file") == audio_file for other in entries.values()):
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
        return name

    def _store_audio(self, audio_hash, audio, audio_samples, sample_rate) -> str | None:
        if audio is not None:
            source = Path(audio)
            target = f"{audio_hash}{source.suffix.lower() or '.wav'}"
            if not (self.folder / target).exists():
                shutil.copyfile(source, self.folder / f".{target}.tmp")
                os.replace(self.folder / f".{target}.tmp", self.folder / target)
            return target
        if audio_samples is not None:
            import soundfile

            if not sample_rate:
                raise VoiceError("audio samples need their sample rate")
            target = f"{audio_hash}.wav"
            temporary = self.folder / f".{target}.tmp.wav"
            soundfile.write(temporary, audio_samples, sample_rate, subtype="FLOAT")
            os.replace(temporary, self.folder / target)
            return target
        return None

    def problem(self) -> str | None:
        """What the user must know about the voice list, or None: a damaged list that was set aside.

        Read from the folder (the set-aside files), so every process sees it; it goes away when the user
        deletes the set-aside file.
        """
        try:
            self._load()
        except VoiceError as error:
            return str(error)
        aside = sorted(self.folder.glob(f"{self.index_path.name}{UNREADABLE_SUFFIX}*"))
        if not aside:
            return None
        kept = (
            f"the voices as last saved were restored from {self.backup_path.name}"
            if self.backup_path.is_file()
            else "there was no earlier copy, so the list starts empty"
        )
        return (
            f"the saved-voice list {self.index_path} could not be read, so it was set aside as "
            f"{aside[-1].name} (never overwritten; voice names can be recovered from it by hand); {kept}. "
            f"Delete {aside[-1]} to dismiss this note"
        )

    def _load(self) -> dict[str, dict]:
        """The index's voices. A damaged index is set aside and the last good copy (if any) takes its place."""
        try:
            return self._parse(self.index_path)
        except FileNotFoundError:
            return {}
        except _Damaged:
            pass
        except OSError as error:
            raise VoiceError(
                f"the voice list {self.index_path} cannot be read ({error}); check the folder's permissions"
            ) from error
        self._set_aside()
        try:
            entries = self._parse(self.backup_path)
        except (OSError, _Damaged):
            return {}
        try:
            atomic_write_bytes(self.index_path, self.backup_path.read_bytes())
        except OSError:  # a read-only folder: keep serving the copy
            pass
        return entries

    @staticmethod
    def _parse(path: Path) -> dict[str, dict]:
        """Raises FileNotFoundError / OSError, or _Damaged when the file is not a voice list."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise _Damaged(str(error)) from error
        voices = data.get("voices") if isinstance(data, dict) else None
        if not isinstance(voices, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("audio_hash"), str) for entry in voices.values()
        ):
            raise _Damaged("not a voice list")
        return voices

    def _set_aside(self) -> None:
        """Rename the damaged index to a new ``voices.json.unreadable-<time>`` name, never over another file."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(100):
            target = self.folder / f"{self.index_path.name}{UNREADABLE_SUFFIX}{stamp}{f'-{attempt}' if attempt else ''}"
            try:
                os.link(self.index_path, target)  # fails if the name is taken: nothing is overwritten
            except FileExistsError:
                continue
            except FileNotFoundError:  # another process set it aside first
                return
            except OSError as error:
                raise VoiceError(
                    f"the voice list {self.index_path} is damaged and could not be set aside "
                    f"({error}); move it away by hand"
                ) from error
            self.index_path.unlink(missing_ok=True)
            return

    def _store(self, entries: dict[str, dict]) -> None:
        """Write the index atomically, then the same bytes as the backup: the last good version, should
        anything damage the index later."""
        payload = json.dumps({"format": 1, "voices": entries}, ensure_ascii=False, indent=1).encode("utf-8")
        atomic_write_bytes(self.index_path, payload)
        try:
            atomic_write_bytes(self.backup_path, payload)
        except OSError:  # the index itself was written; the next change tries the backup again
            pass


class _Damaged(ValueError):
    """A voice list file that exists but is not valid JSON of the expected shape."""
