"""The preview voice's base statistics kept between processes (cosyvoice_mac/preview/kept_base_voice.py).

A new ``PreviewVoice`` stands for a new process: it holds no statistics of its own. The Piper speaker is shared,
so only the statistics are measured or read here; the cache folder is this test's.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("piper")
pytest.importorskip("pyworld")

from cosyvoice_mac import paths  # noqa: E402
from cosyvoice_mac.preview import world_convert  # noqa: E402
from cosyvoice_mac.preview.backend import CONVERSION_VERSION, ENGLISH_REFERENCE, PreviewVoice  # noqa: E402
from cosyvoice_mac.preview.kept_base_voice import kept_path  # noqa: E402
from cosyvoice_mac.preview.piper_tts import speaker_identity  # noqa: E402

TEXT = "Hi there."


@pytest.fixture(scope="module")
def speaker():
    return PreviewVoice.from_pretrained().english


@pytest.fixture(scope="module")
def prompt(speaker, make_speech):
    return PreviewVoice(english=speaker).prepare_prompt(make_speech("The boy was there when the sun rose."))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "user_cache_dir", lambda: tmp_path)
    return tmp_path / "preview"


def fresh_voice(speaker) -> tuple[PreviewVoice, list[str]]:
    """A voice with no statistics yet, and the texts it speaks (the reference, when it measures)."""
    voice = PreviewVoice(english=speaker)
    spoken: list[str] = []
    real = voice._speak

    def speaking(key, text, **options):
        spoken.append(text)
        return real(key, text, **options)

    voice._speak = speaking
    return voice, spoken


def audio(voice: PreviewVoice, prompt) -> np.ndarray:
    return np.concatenate([result.audio for result in voice.synthesize(TEXT, speaker=prompt, seed=7)])


def test_the_next_voice_reads_the_kept_statistics_and_speaks_the_same(speaker, prompt, cache):
    first, first_spoken = fresh_voice(speaker)
    measured = audio(first, prompt)
    assert first_spoken == [ENGLISH_REFERENCE, TEXT]
    (kept,) = cache.glob("base-voice-*.npy")
    second, second_spoken = fresh_voice(speaker)
    np.testing.assert_array_equal(audio(second, prompt), measured)  # bit-equal: the rows are kept in float64
    assert second_spoken == [TEXT]  # before: the reference spoken and analysed again (~1.3 s of CPU)
    assert kept.stat().st_size > 0


@pytest.mark.parametrize("damage", [b"not numbers", b"", "wrong rows"])
def test_a_damaged_kept_file_is_measured_again_and_replaced(speaker, prompt, cache, damage):
    first, _ = fresh_voice(speaker)
    measured = audio(first, prompt)
    (kept,) = cache.glob("base-voice-*.npy")
    if damage == "wrong rows":
        np.save(kept, np.zeros((3, world_convert.STATS_VECTOR_SIZE)))
    else:
        kept.write_bytes(damage)
    second, second_spoken = fresh_voice(speaker)
    np.testing.assert_array_equal(audio(second, prompt), measured)
    assert second_spoken == [ENGLISH_REFERENCE, TEXT]
    assert np.load(kept).shape == (len(world_convert.WARP_GRID), world_convert.STATS_VECTOR_SIZE)


def test_a_cache_that_cannot_be_written_only_means_measuring_again(speaker, prompt, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(paths, "user_cache_dir", lambda: blocked)  # mkdir under a file fails
    voice, spoken = fresh_voice(speaker)
    assert audio(voice, prompt).size > 0 and spoken == [ENGLISH_REFERENCE, TEXT]


def test_statistics_are_kept_apart_for_another_voice_text_or_conversion(speaker, cache):
    identity = speaker.identity
    assert speaker_identity(b"graph", b"config") != speaker_identity(b"graph", b"other config")
    here = kept_path(identity, ENGLISH_REFERENCE, CONVERSION_VERSION)
    assert here.parent == cache
    assert kept_path("another voice", ENGLISH_REFERENCE, CONVERSION_VERSION) != here
    assert kept_path(identity, "another reference", CONVERSION_VERSION) != here
    assert kept_path(identity, ENGLISH_REFERENCE, CONVERSION_VERSION + 1) != here
