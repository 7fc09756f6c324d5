"""Speaker cache: prompt features keyed by model id + audio content hash (named voices: ``voice_library.py``).

Layout under the user cache folder (``user_cache_dir()``)::

    speakers/v<FORMAT>/<model key>/<audio hash>.safetensors   tensors: speech_tokens, mel, embedding
    speakers/v<FORMAT>/<model key>/<audio hash>.json          facts; written last, so it marks a complete entry

A change of CACHE_FORMAT moves entries to a new folder and deletes the old ones, so stale features
are never read. torch is imported only by the methods that handle tensors.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from cosyvoice_mac.engine.voice_library import check_audio_hash
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.stored import read_json

if TYPE_CHECKING:
    from cosyvoice_mac.pipeline.types import SpeakerPrompt

CACHE_FORMAT = 1
TENSOR_NAMES = ("speech_tokens", "mel", "embedding")


def _model_key(model_id: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)[:48]
    return f"{readable}-{hashlib.sha256(model_id.encode()).hexdigest()[:8]}"


def cache_folder(root: str | Path) -> Path:
    """The speaker cache's folder of this format under the cache root ``root``."""
    return Path(root) / "speakers" / f"v{CACHE_FORMAT}"


def entry_files(root: str | Path, audio_hash: str) -> list[tuple[str, Path, Path]]:
    """Every model's complete entry of ``audio_hash`` under ``root``: (model id, tensors file, facts file),
    read from the facts each entry wrote (torch-free: a voices file carries them as they are)."""
    found = []
    for facts_path in sorted(cache_folder(root).glob(f"*/{check_audio_hash(audio_hash)}.json")):
        tensor_path = facts_path.with_suffix(".safetensors")
        try:
            facts = read_json(facts_path)
        except (OSError, ValueError):
            continue
        if isinstance(facts, dict) and isinstance(facts.get("model_id"), str) and tensor_path.is_file():
            if facts_path.parent.name == _model_key(facts["model_id"]):
                found.append((facts["model_id"], tensor_path, facts_path))
    return found


def entry_problem(model_id: str, audio_hash: str, tensors: bytes, facts: bytes) -> str | None:
    """Why the entry's files (a safetensors file and its facts) are not an entry of this format for
    (``model_id``, ``audio_hash``), or None. Torch-free: the safetensors header is read as JSON."""
    try:
        described = json.loads(facts.decode("utf-8"))
        expected = {"format": CACHE_FORMAT, "model_id": model_id, "audio_hash": audio_hash}
        if not isinstance(described, dict) or any(described.get(key) != value for key, value in expected.items()):
            return "its facts are not of this cache format, model and recording"
        header_size = int.from_bytes(tensors[:8], "little")
        if len(tensors) < 8 or header_size > len(tensors) - 8:
            return "its tensors file is cut short"
        header = json.loads(tensors[8 : 8 + header_size].decode("utf-8"))
        body = len(tensors) - 8 - header_size
        shapes = {}
        for name, info in header.items():
            if name != "__metadata__":
                begin, end = info["data_offsets"]
                if not 0 <= begin <= end <= body:
                    return f"its tensor {name!r} lies outside the file"
                shapes[name] = list(info["shape"])
        if shapes != {name: list(described["shapes"][name]) for name in TENSOR_NAMES}:
            return "its tensors do not match its facts"
    except (ValueError, KeyError, TypeError, AttributeError):
        return "its files cannot be read"
    return None


def store_entry_files(root: str | Path, model_id: str, audio_hash: str, tensors: bytes, facts: bytes) -> bool:
    """Write an entry checked by :func:`entry_problem` under ``root`` (the facts last, marking it complete),
    unless the cache holds one already; whether it was written."""
    stem = cache_folder(root) / _model_key(model_id) / check_audio_hash(audio_hash)
    if stem.with_suffix(".json").is_file():
        return False
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(stem.with_suffix(".safetensors"), tensors)
    atomic_write(stem.with_suffix(".json"), facts)
    return True


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
        self.folder = cache_folder(self.root)
        self.memory_entries = max(0, memory_entries)
        self._memory: OrderedDict[tuple[str, str], SpeakerPrompt] = OrderedDict()
        self.stats = CacheStats()
        self.last_disk_error: str | None = None
        self._drop_old_formats()

    def paths(self, model_id: str, audio_hash: str) -> tuple[Path, Path]:
        stem = self.folder / _model_key(model_id) / check_audio_hash(audio_hash)
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
        atomic_write(tensor_path, save(tensors, metadata=metadata))
        atomic_write(facts_path, json.dumps(facts, ensure_ascii=False, indent=1).encode("utf-8"))

    def _read(self, model_id: str, audio_hash: str) -> SpeakerPrompt | None:
        from safetensors import SafetensorError
        from safetensors.torch import load

        from cosyvoice_mac.pipeline.types import SpeakerPrompt

        tensor_path, facts_path = self.paths(model_id, audio_hash)
        if not facts_path.is_file():
            return None
        try:
            facts = read_json(facts_path)  # any damage below: extracted again (a cache: nothing is lost)
            if not isinstance(facts, dict):
                raise ValueError("entry facts are not a record")
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
