"""Speaker cache (memory LRU over disk, versioned) and named voices."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac.engine import cache as cache_module
from cosyvoice_mac.engine.cache import SpeakerCache
from cosyvoice_mac.engine.voice_library import VoiceAudioRefused, VoiceError, VoiceLibrary
from cosyvoice_mac.paths import user_cache_dir
from cosyvoice_mac.pipeline.types import SpeakerPrompt

MODEL = "tiny-cosyvoice3-abc"


def _voiced(seconds: float, rate: int = 16000) -> np.ndarray:
    """(N,) float32 of a warbling tone that the prompt check takes for sound throughout (no voice, though)."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)).astype(np.float32)


def _prompt(audio_hash: str, model_id: str = MODEL, transcript: str | None = "hello", frames: int = 6):
    generator = torch.Generator().manual_seed(len(audio_hash) + frames)
    return SpeakerPrompt(
        speech_tokens=torch.randint(0, 6561, (1, frames), generator=generator),
        mel=torch.randn(1, 2 * frames, 80, generator=generator),
        embedding=torch.randn(1, 192, generator=generator),
        audio_hash=audio_hash,
        model_id=model_id,
        transcript=transcript,
        duration_s=1.5,
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


@pytest.mark.parametrize("facts_written", [b"[1, 2]", b'"a string"', b"{", b'{"format": "x", "shapes": 5}'])
def test_an_entry_whose_facts_are_no_record_is_a_miss_and_is_removed(tmp_path, facts_written):
    cache = SpeakerCache(tmp_path)
    cache.put(_prompt("8" * 64))
    tensors, facts = cache.paths(MODEL, "8" * 64)
    facts.write_bytes(facts_written)
    assert SpeakerCache(tmp_path).lookup(MODEL, "8" * 64) == (None, "miss")  # extracted again, never an error
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


def test_named_voices_save_list_rename_delete(tmp_path, make_speech):
    voices = VoiceLibrary(tmp_path)
    assert voices.list() == []
    source = make_speech("Somebody reads this for the narrator.", seconds=3.0, sample_rate=16000)
    spoken, rate = soundfile.read(
        make_speech("Alice says a few words.", seconds=2.0, sample_rate=16000), dtype="float32"
    )
    voices.save("Narrator", audio_hash="a" * 64, model_id=MODEL, transcript="hi", audio=source)
    voices.save("alice", audio_hash="b" * 64, model_id=MODEL, audio_samples=spoken, sample_rate=rate)
    assert [v["name"] for v in voices.list()] == ["alice", "Narrator"]
    narrator = voices.get("Narrator")
    stored = (tmp_path / "voices" / narrator["audio_file"]).read_bytes()
    assert narrator["transcript"] == "hi" and stored == source.read_bytes()

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


def test_the_library_refuses_a_recording_no_job_could_use_and_saves_nothing(tmp_path):
    """The last line of defence for every door that saves a voice (the CLI's ``voices add`` saved these)."""
    voices = VoiceLibrary(tmp_path)
    five_minutes = tmp_path / "lecture.wav"
    soundfile.write(five_minutes, _voiced(300.0), 16000)
    with pytest.raises(VoiceAudioRefused, match=r"lecture.wav has 300.0 s of speech; the model takes") as refused:
        voices.save("Lecture", audio_hash="a" * 64, model_id=MODEL, audio=five_minutes)
    assert refused.value.problem == "too_long"
    with pytest.raises(VoiceAudioRefused, match="silent"):
        silence = np.zeros(32000, np.float32)
        voices.save("Hush", audio_hash="b" * 64, model_id=MODEL, audio_samples=silence, sample_rate=16000)
    assert voices.list() == [] and not list(voices.folder.glob("*.wav"))


def test_the_library_refuses_a_tone_that_the_prompt_check_alone_took_for_a_voice(tmp_path):
    """Sound throughout and the right length, but no one speaking: the speech detector refuses it (a recording
    to convert is refused by the same rule), from a file and from samples alike."""
    voices = VoiceLibrary(tmp_path)
    warble = tmp_path / "warble.wav"
    soundfile.write(warble, _voiced(3.0), 16000)
    with pytest.raises(VoiceAudioRefused, match="warble.wav holds no speech") as refused:
        voices.save("Warble", audio_hash="a" * 64, model_id=MODEL, audio=warble)
    assert refused.value.problem == "not_speech"
    with pytest.raises(VoiceAudioRefused, match="no speech"):
        voices.save("Samples", audio_hash="b" * 64, model_id=MODEL, audio_samples=_voiced(3.0), sample_rate=16000)
    assert voices.list() == [] and not list(voices.folder.glob("*.wav"))


@pytest.mark.parametrize("name", ["", "   ", "x" * 65, "tab\there", "preview", "Preview "])
def test_bad_voice_names_are_refused(tmp_path, name):
    with pytest.raises(VoiceError):
        VoiceLibrary(tmp_path).save(name, audio_hash="a" * 64, model_id=MODEL)


def test_damaged_voice_list_says_which_file(tmp_path):
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "voices.json").write_text("{not json")
    assert VoiceLibrary(tmp_path).list() == []  # the page keeps working
    assert "voices.json" in VoiceLibrary(tmp_path).problem()


@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe\x00garbage", b'{"voices": ["a list"]}', b"[]", b""])
def test_a_damaged_voice_list_is_set_aside_and_the_last_good_copy_serves(tmp_path, damage):
    library = VoiceLibrary(tmp_path)
    library.save("alice", audio_hash="a" * 64, model_id=MODEL)
    library.save("bob", audio_hash="b" * 64, model_id=MODEL)
    assert library.problem() is None
    library.index_path.write_bytes(damage)
    fresh = VoiceLibrary(tmp_path)  # as at the next start
    assert [entry["name"] for entry in fresh.list()] == ["alice", "bob"]
    aside = list(library.folder.glob("voices.json.unreadable-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damage  # kept, byte for byte
    note = fresh.problem()
    assert note and aside[0].name in note and "restored" in note
    fresh.save("carol", audio_hash="c" * 64, model_id=MODEL)  # keeps working
    assert [entry["name"] for entry in VoiceLibrary(tmp_path).list()] == ["alice", "bob", "carol"]
    aside[0].unlink()
    assert fresh.problem() is None


def test_an_index_and_backup_both_damaged_are_both_kept_and_the_note_says_neither_was_readable(tmp_path):
    library = VoiceLibrary(tmp_path)
    library.save("alice", audio_hash="a" * 64, model_id=MODEL)
    library.index_path.write_bytes(b'{"format": 1, "voices": {"half')
    library.backup_path.write_bytes(b"\x00\x00 torn")
    fresh = VoiceLibrary(tmp_path)  # as at the next start
    assert fresh.list() == []
    index_aside = list(library.folder.glob("voices.json.unreadable-*"))
    backup_aside = list(library.folder.glob("voices.json.bak.unreadable-*"))
    assert [path.read_bytes() for path in index_aside] == [b'{"format": 1, "voices": {"half']  # kept as they were
    assert [path.read_bytes() for path in backup_aside] == [b"\x00\x00 torn"]
    note = fresh.problem()
    assert "restored" not in note and "starts empty" in note and "could not be read" in note
    assert index_aside[0].name in note and backup_aside[0].name in note
    fresh.save("bob", audio_hash="b" * 64, model_id=MODEL)  # a new backup is written; the kept copies stay
    assert backup_aside[0].read_bytes() == b"\x00\x00 torn" and "restored" not in fresh.problem()


def test_a_second_damage_never_overwrites_the_first_set_aside_file(tmp_path):
    library = VoiceLibrary(tmp_path)
    for damage in (b"{one", b"{two", b"{three"):
        library.folder.mkdir(parents=True, exist_ok=True)
        library.index_path.write_bytes(damage)
        assert library.list() == []
    kept = sorted(path.read_bytes() for path in library.folder.glob("voices.json.unreadable-*"))
    assert kept == [b"{one", b"{three", b"{two"]
    assert "starts empty" in library.problem()


def test_the_voice_list_is_written_atomically_with_a_backup(tmp_path, monkeypatch):
    library = VoiceLibrary(tmp_path)
    library.save("alice", audio_hash="a" * 64, model_id=MODEL)
    assert library.backup_path.read_bytes() == library.index_path.read_bytes()
    import cosyvoice_mac.engine.voice_library as library_module

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(library_module, "atomic_write", full_disk)
    with pytest.raises(OSError):
        library.save("bob", audio_hash="b" * 64, model_id=MODEL)
    assert [entry["name"] for entry in library.list()] == ["alice"]  # the old index is whole
