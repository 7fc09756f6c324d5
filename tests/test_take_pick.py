"""Another kept take put in a saved result (``engine.take_pick``), on files laid out as the worker keeps them: the
output is rebuilt from every sentence's take, post-processed as the job was, its captions follow the takes on the
new timeline, and a take that cannot be used changes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosyvoice_mac.engine.outputs import write_output
from cosyvoice_mac.engine.take_pick import TakePickError, takes_to_pick, use_take
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES
from cosyvoice_mac.sound.wav import read_samples, write_wav

RATE = 24000


def _sound(seconds: float, seed: int) -> np.ndarray:
    return (0.3 * np.random.default_rng(seed).standard_normal(int(seconds * RATE))).clip(-0.9, 0.9).astype(np.float32)


def _take(outputs, name: str, audio: np.ndarray, words: list[dict]) -> dict:
    write_wav(outputs / "takes" / "job" / f"{name}.wav", audio, RATE)
    (outputs / "takes" / "job" / f"{name}{SUFFIXES['json']}").write_text(json.dumps(words))
    return {"file": f"takes/job/{name}.wav", "seed": len(name), "passed": name != "s2-t1", "problems": []}


@pytest.fixture
def saved(tmp_path):
    """A two-sentence result, trimmed: sentence 1 (one take, a fifth of a second of silence first), sentence 2
    (two takes, the first kept)."""
    silence_then_sound = np.concatenate([np.zeros(int(0.2 * RATE), np.float32), _sound(0.5, 1)])
    takes = {
        "s1-t1": (silence_then_sound, [{"word": "Hello.", "start": 0.2, "end": 0.7}]),
        "s2-t1": (
            _sound(1.0, 2),
            [{"word": "There", "start": 0.0, "end": 0.4}, {"word": "now.", "start": 0.5, "end": 1.0}],
        ),
        "s2-t2": (
            _sound(0.6, 3),
            [{"word": "There", "start": 0.0, "end": 0.25}, {"word": "now.", "start": 0.3, "end": 0.6}],
        ),
    }
    entries = {name: _take(tmp_path, name, *take) for name, take in takes.items()}
    check = {
        "status": "flagged",
        "sentences": [
            {"status": "passed", "kept": 1, "note": None, "takes": [entries["s1-t1"]]},
            {"status": "flagged", "kept": 1, "note": "kept take 1 of 2", "takes": [entries["s2-t1"], entries["s2-t2"]]},
        ],
    }
    facts = {"text": "Hello. There now.", "check": check, "post": {"trim": True, "loudness_lufs": None}, "notes": []}
    audio = np.concatenate([takes["s1-t1"][0], takes["s2-t1"][0]])
    files = write_output(tmp_path, "job", audio, RATE, facts)
    return files, {name: read_samples(tmp_path / entry["file"]) for name, entry in entries.items()}


def test_the_output_is_rebuilt_from_each_sentences_take_trimmed_as_before_with_its_captions_moved(saved):
    files, takes = saved
    assert [
        (index, number) for index, number, _ in takes_to_pick(json.loads(files.sidecar_path.read_text())["check"])
    ] == [(2, 2)]
    check = use_take(files.wav_path, 2, 2)
    audio = read_samples(files.wav_path)
    joined = np.concatenate([takes["s1-t1"], takes["s2-t2"]])
    sidecar = json.loads(files.sidecar_path.read_text())
    cut = round(sidecar["post"]["trimmed_start_ms"] * RATE / 1000)  # the silence trimmed as the job trimmed it
    assert 0.15 * RATE < cut < 0.2 * RATE and np.array_equal(audio, joined[cut : cut + len(audio)])
    words = json.loads(files.wav_path.with_suffix(SUFFIXES["json"]).read_text())
    sentence_two = len(takes["s1-t1"]) / RATE - cut / RATE
    assert words[0]["start"] == pytest.approx(0.2 - cut / RATE, abs=1e-3)
    assert [word["word"] for word in words] == ["Hello.", "There", "now."]
    assert words[1]["start"] == pytest.approx(sentence_two, abs=1e-3) and words[2]["end"] == pytest.approx(
        sentence_two + 0.6, abs=1e-3
    )
    assert files.wav_path.with_suffix(".srt").read_text().startswith("1\n00:00:00,0")
    assert sidecar["check"] == check and check["status"] == "retaken"  # the picked take passed
    assert check["sentences"][1]["kept"] == 2 and check["sentences"][1]["picked"]
    assert sidecar["duration_s"] == round(len(audio) / RATE, 3)
    from cosyvoice_mac.provenance.verify import VALID, read_credentials

    assert read_credentials(files.wav_path).verdict == VALID  # signed again over the new samples


def test_a_take_that_cannot_be_used_changes_nothing(saved):
    files, _ = saved
    before = (files.wav_path.read_bytes(), files.sidecar_path.read_bytes())
    for sentence, take, words in ((2, 1, "already"), (1, 2, "no take 2 of sentence 1"), (3, 1, "no take 1 of")):
        with pytest.raises(TakePickError, match=words):
            use_take(files.wav_path, sentence, take)
    (files.wav_path.parent / "takes" / "job" / "s1-t1.wav").unlink()  # deleted by hand: the output cannot be made
    with pytest.raises(TakePickError, match="s1-t1.wav are no longer in"):
        use_take(files.wav_path, 2, 2)
    assert (files.wav_path.read_bytes(), files.sidecar_path.read_bytes()) == before
