"""Speaker cache (memory LRU over disk, versioned) and named voices."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from cosyvoice_mac.engine import cache as cache_module
from cosyvoice_mac.engine.cache import SpeakerCache, VoiceError, VoiceLibrary, user_cache_dir
from cosyvoice_mac.pipeline.types import SpeakerPrompt

MODEL = "tiny-cosyvoice3-abc"


def _prompt(audio_hash: str, model_id: str = MODEL, transcript: str | None = "hello", frames: int = 6):
    generator = torch.Generator().manual_seed(len(audio_hash) + frames)
    return SpeakerPrompt(
        speech_tokens=torch.randint(0, 6561, (1, frames), generator=generator),
        mel=torch.randn(1, 2 * frames, 80, generator=generator),
        embedding=torch.randn(1, 192, generator=generator),
        audio_hash=audio_hash, model_id=model_id, transcript=transcript, duration_s=1.5,
    )


class Extractor:
    """Counts feature extractions, the expensive step the cache exists to skip."""

    def __init__(self, prompt):
        self.prompt, self.calls = prompt, 0

    def __call__(self):
        self.calls += 1
        return self.prompt


def _same(a: SpeakerPrompt, b: SpeakerPrompt) -> bool:
    return all(torch.equal(getattr(a, name), getattr(b, name)) for name in ("speech_tokens", "mel", "embedding"))


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("COSYVOICE_CACHE_DIR")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "cosyvoice-mac"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "cosyvoice-mac"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert user_cache_dir() == tmp_path / "home" / "Library" / "Caches" / "cosyvoice-mac"


def test_second_request_skips_extraction_and_a_new_process_reads_disk(tmp_path):
    extractor = Extractor(_prompt("a" * 64))
    cache = SpeakerCache(tmp_path)
    first, source = cache.get_or_extract(MODEL, "a" * 64, extractor, transcript="hello")
    assert source == "extracted" and extractor.calls == 1
    again, source = cache.get_or_extract(MODEL, "a" * 64, extractor, transcript="hello")
    assert source == "memory" and extractor.calls == 1 and _same(first, again)

    restarted = SpeakerCache(tmp_path)  # what a restarted worker sees
    from_disk, source = restarted.get_or_extract(MODEL, "a" * 64, extractor, transcript="other words")
    assert source == "disk" and extractor.calls == 1
    assert _same(first, from_disk) and from_disk.transcript == "other words" and from_disk.duration_s == 1.5
    assert restarted.stats.as_dict() == {"memory_hits": 0, "disk_hits": 1, "misses": 0, "hit_rate": 1.0}


def test_entries_are_per_model(tmp_path):
    cache = SpeakerCache(tmp_path)
    cache.put(_prompt("b" * 64, model_id="model-one"))
    assert cache.lookup("model-two", "b" * 64) == (None, "miss")
    assert cache.lookup("model-one", "b" * 64)[1] == "memory"


def test_memory_is_a_bounded_lru(tmp_path):
    cache = SpeakerCache(tmp_path, memory_entries=2)
    for letter in "cde":
        cache.put(_prompt(letter * 64))
    assert cache.lookup(MODEL, "c" * 64)[1] == "disk"  # evicted from memory, still on disk
    assert cache.lookup(MODEL, "e" * 64)[1] == "memory"


def test_format_change_invalidates_old_entries(tmp_path, monkeypatch):
    SpeakerCache(tmp_path).put(_prompt("f" * 64))
    monkeypatch.setattr(cache_module, "CACHE_FORMAT", cache_module.CACHE_FORMAT + 1)
    newer = SpeakerCache(tmp_path)
    assert newer.lookup(MODEL, "f" * 64) == (None, "miss")
    assert list((tmp_path / "speakers").iterdir()) == []  # the old format's folder is gone


def test_damaged_entry_is_a_miss_and_is_removed(tmp_path):
    cache = SpeakerCache(tmp_path)
    cache.put(_prompt("9" * 64))
    tensors, facts = cache.paths(MODEL, "9" * 64)
    tensors.write_bytes(b"garbage")
    fresh = SpeakerCache(tmp_path)
    assert fresh.lookup(MODEL, "9" * 64) == (None, "miss")
    assert not tensors.exists() and not facts.exists()


def test_entry_files_are_complete_and_versioned(tmp_path):
    cache = SpeakerCache(tmp_path)
    cache.put(_prompt("7" * 64))
    tensors, facts = cache.paths(MODEL, "7" * 64)
    data = json.loads(facts.read_text())
    assert data["format"] == cache_module.CACHE_FORMAT and data["audio_hash"] == "7" * 64
    assert data["shapes"] == {"speech_tokens": [1, 6], "mel": [1, 12, 80], "embedding": [1, 192]}
    assert not [p for p in tensors.parent.iterdir() if p.name.startswith(".")]  # no temp files left


def test_unwritable_disk_only_loses_the_disk_copy(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    cache = SpeakerCache(blocker)
    assert cache.put(_prompt("8" * 64)) is False
    assert "not saved" in cache.last_disk_error
    assert cache.lookup(MODEL, "8" * 64)[1] == "memory"


def test_bad_hash_is_refused(tmp_path):
    with pytest.raises(ValueError, match="content hash"):
        SpeakerCache(tmp_path).lookup(MODEL, "../../etc/passwd")


def test_named_voices_save_list_rename_delete(tmp_path):
    voices = VoiceLibrary(tmp_path)
    assert voices.list() == []
    source = tmp_path / "me.wav"
    source.write_bytes(b"RIFF....")
    voices.save("Narrator", audio_hash="a" * 64, model_id=MODEL, transcript="hi", audio=source)
    voices.save("alice", audio_hash="b" * 64, model_id=MODEL,
                audio_samples=np.zeros(1600, np.float32), sample_rate=16000)
    assert [v["name"] for v in voices.list()] == ["alice", "Narrator"]
    narrator = voices.get("Narrator")
    assert narrator["transcript"] == "hi" and (tmp_path / "voices" / narrator["audio_file"]).read_bytes() == b"RIFF...."

    with pytest.raises(VoiceError, match="already exists"):
        voices.save("alice", audio_hash="c" * 64, model_id=MODEL)
    voices.rename("Narrator", "Storyteller")
    assert [v["name"] for v in VoiceLibrary(tmp_path).list()] == ["alice", "Storyteller"]
    with pytest.raises(VoiceError, match="no saved voice"):
        voices.get("Narrator")
    with pytest.raises(VoiceError, match="already exists"):
        voices.rename("alice", "Storyteller")

    audio_file = tmp_path / "voices" / voices.get("Storyteller")["audio_file"]
    voices.delete("Storyteller")
    assert not audio_file.exists() and [v["name"] for v in voices.list()] == ["alice"]
    with pytest.raises(VoiceError):
        voices.delete("Storyteller")


@pytest.mark.parametrize("name", ["", "   ", "x" * 65, "tab\there"])
def test_bad_voice_names_are_refused(tmp_path, name):
    with pytest.raises(VoiceError):
        VoiceLibrary(tmp_path).save(name, audio_hash="a" * 64, model_id=MODEL)


def test_damaged_voice_list_says_which_file(tmp_path):
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "voices.json").write_text("{not json")
    with pytest.raises(VoiceError, match="voices.json"):
        VoiceLibrary(tmp_path).list()
