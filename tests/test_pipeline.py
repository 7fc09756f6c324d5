"""The public pipeline on tiny random-weight models in the official folder layout.

Covers the three modes, determinism by seed, speed, sentence splitting, and that bad input
gives our clear error (never a crash or a hang).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from cosyvoice_mac.errors import InputError
from cosyvoice_mac.pipeline import CosyVoice, SynthesisError
from cosyvoice_mac.pipeline.model_dir import ModelFolderError
from cosyvoice_mac.request import Sampling
from tests.fakes.onnx_models import make_tiny_model_dir

# The suite runs on the CPU in CI; COSYVOICE_TEST_DEVICE=cuda (or mps) runs it on an accelerator.
TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")

VERSIONS = ("cosyvoice3", "cosyvoice2")


@pytest.fixture(scope="module", params=VERSIONS)
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


@pytest.fixture(scope="module")
def prompt_wav(make_speech):
    return make_speech("Hello there, this is a short prompt for testing.", seconds=3.0)


def _speak(model, prompt_wav, text="Hello world.", **kwargs):
    return list(model.synthesize(text, prompt_audio=prompt_wav, **kwargs))


@pytest.mark.parametrize(
    ("kwargs", "mode"),
    [
        ({"prompt_text": "Hello there, this is a short prompt for testing."}, "zero_shot"),
        ({}, "cross_lingual"),
        ({"instruct": "Speak sadly."}, "instruct"),
    ],
)
def test_each_mode_gives_finite_audio_of_the_token_length(model, prompt_wav, kwargs, mode):
    results = _speak(model, prompt_wav, seed=7, **kwargs)
    assert len(results) == 1
    result = results[0]
    assert result.mode == mode and result.sample_rate == 24000
    assert result.audio.dtype == np.float32 and np.isfinite(result.audio).all()
    assert len(result.audio) == 960 * result.speech_token_count  # 2 mel frames x 480 samples per token
    assert np.abs(result.audio).max() <= 0.99 + 1e-6
    assert result.real_time_factor > 0 and set(result.timings) >= {"llm", "flow", "vocoder"}


def test_same_seed_same_audio_other_seed_other_audio(model, prompt_wav):
    first = _speak(model, prompt_wav, seed=11)[0].audio
    again = _speak(model, prompt_wav, seed=11)[0].audio
    other = _speak(model, prompt_wav, seed=12)[0].audio
    assert np.array_equal(first, again)
    assert len(first) != len(other) or not np.array_equal(first, other)


def test_seed_is_reported_when_not_given(model, prompt_wav):
    result = _speak(model, prompt_wav)[0]
    again = _speak(model, prompt_wav, seed=result.seed)[0]
    assert np.array_equal(result.audio, again.audio)


def test_speed_changes_duration(model, prompt_wav):
    normal = _speak(model, prompt_wav, seed=3)[0]
    fast = _speak(model, prompt_wav, seed=3, speed=2.0)[0]
    assert fast.speech_token_count == normal.speech_token_count
    assert len(fast.audio) == 480 * int(2 * normal.speech_token_count / 2.0)


def test_long_text_is_split_and_yielded_sentence_by_sentence(model, prompt_wav, monkeypatch):
    # The tiny random LLM speaks each segment to its length limit (CosyVoice2's: 30 s a run): a second of speech
    # per segment says as much about the splitting.
    monkeypatch.setattr(model.networks.llm, "length_limits", lambda text_length: (25, 25))
    sentence = "The quick brown fox jumps over the lazy dog. "
    results = _speak(model, prompt_wav, text=sentence * 12, seed=5)
    assert len(results) >= 2
    assert [r.segment_index for r in results] == list(range(len(results)))
    assert all(r.segment_count == len(results) for r in results)


def test_cached_speaker_prompt_gives_the_same_audio(model, prompt_wav):
    speaker = model.prepare_prompt(prompt_wav)
    direct = _speak(model, prompt_wav, seed=9)[0].audio
    cached = list(model.synthesize("Hello world.", speaker=speaker, seed=9))[0].audio
    assert np.array_equal(direct, cached)


def test_should_stop_ends_the_request(model, prompt_wav):
    text = "One sentence here. " * 30
    assert list(model.synthesize(text, prompt_audio=prompt_wav, should_stop=lambda: True)) == []


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("", {}, "empty"),
        ("   ", {}, "empty"),
        ("?!... ,", {}, "nothing to speak"),
        ("x" * 100_000, {}, "the limit is 5,000"),
        ("Hello.", {"speed": 5.0}, "speed"),
        ("Hello.", {"speed": "fast"}, "speed"),
    ],
)
def test_bad_text_and_settings_give_clear_errors(model, prompt_wav, text, kwargs, message):
    with pytest.raises(InputError, match=message):  # a RequestError, or the model's SynthesisError
        _speak(model, prompt_wav, text=text, **kwargs)


def test_unknown_markup_is_a_clear_error(model, prompt_wav):
    with pytest.raises(SynthesisError, match=r"\[zz\]"):
        _speak(model, prompt_wav, text="Say [zz][qq] now.")


def test_prompt_over_30_seconds_is_refused(model, make_speech):
    long_prompt = make_speech("This prompt keeps talking for a very long time.", seconds=31.0)
    with pytest.raises(SynthesisError, match="at most"):
        _speak(model, long_prompt)


def test_missing_prompt_is_refused(model):
    with pytest.raises(InputError, match="prompt voice"):
        list(model.synthesize("Hello."))


def test_microphone_samples_work_like_a_file(model, prompt_wav):
    import soundfile

    samples, rate = soundfile.read(prompt_wav, dtype="float32")
    from_file = model.prepare_prompt(prompt_wav)
    from_samples = model.prepare_prompt(samples, sample_rate=rate)
    assert torch.equal(from_file.speech_tokens, from_samples.speech_tokens)


def test_not_a_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelFolderError, match="download"):
        CosyVoice.from_pretrained(tmp_path)


def test_missing_checkpoint_names_the_file_and_hub_repo(tmp_path):
    folder = make_tiny_model_dir("cosyvoice3", tmp_path / "m")
    (folder / "flow.pt").unlink()
    with pytest.raises(ModelFolderError, match=r"flow\.pt.*FunAudioLLM/Fun-CosyVoice3-0\.5B-2512"):
        CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


def test_inline_tags_and_sampling_reach_the_model(model, prompt_wav, monkeypatch):
    """A style runs in instruct mode, a pause is exact silence, a speed run is stretched, and the sampling
    settings reach the sampler (the model's own given explicitly change nothing; top_k=1 changes the tokens)."""
    if model.version != "cosyvoice3":
        pytest.skip("one version is enough: the plan tests cover CosyVoice2's wording")
    monkeypatch.setattr(model.networks.llm, "length_limits", lambda text_length: (20, 20))  # a short run each
    text = "(happy) Good news. [pause 250ms] [speed 2] Bye now."
    pieces = _speak(model, prompt_wav, text=text, seed=5, prompt_text="Hello there, this is a short prompt.")
    assert [(p.mode, p.text) for p in pieces] == [
        ("instruct", "Good news."),
        ("zero_shot", ""),
        ("zero_shot", "Bye now."),
    ]
    assert len(pieces[1].audio) == 6000 and not pieces[1].audio.any()
    assert len(pieces[2].audio) == 480 * int(2 * pieces[2].speech_token_count / 2)
    own = model.networks.llm.config
    plain = _speak(model, prompt_wav, seed=5)[0]
    same = _speak(model, prompt_wav, seed=5, sampling=Sampling(top_p=own.top_p, top_k=own.top_k))[0]
    greedy = _speak(model, prompt_wav, seed=5, sampling=Sampling(top_k=1))[0]
    assert np.array_equal(plain.audio, same.audio)
    assert not np.array_equal(plain.audio, greedy.audio)
    assert model.sampling_used(Sampling(top_k=1)) == {
        "temperature": 1.0,
        "top_p": own.top_p,
        "top_k": 1,
        "repetition_window": own.win_size,
    }


def test_a_voice_carried_in_a_voices_file_speaks_the_same_audio_for_a_seed(model, prompt_wav, tmp_path):
    """Issue 49's round trip on each version's tiny model: export, delete, import; the features the import reads
    from the file (never extracted again) give the audio the voice gave before for the same seed."""
    from dataclasses import replace

    from cosyvoice_mac.engine.cache import SpeakerCache
    from cosyvoice_mac.engine.voice_library import VoiceLibrary
    from cosyvoice_mac.engine.voice_transfer import export_voices, import_voices

    root = tmp_path / "cache"
    library, prompt = VoiceLibrary(root), model.prepare_prompt(prompt_wav)
    SpeakerCache(root).put(prompt)
    library.save(
        "Tiny", audio_hash=prompt.audio_hash, model_id=model.model_id, transcript="Hello there.", audio=prompt_wav
    )

    def spoken() -> np.ndarray:  # as the worker speaks a saved voice: its cached features and transcript
        entry = library.styled("Tiny", None)
        speaker, source = SpeakerCache(root).lookup(entry["model_id"], entry["audio_hash"])
        assert source == "disk"  # read from the cache folder, never extracted again
        return list(model.synthesize("Hi.", replace(speaker, transcript=entry["transcript"]), seed=5))[0].audio

    before = spoken()
    exported = export_voices(library)
    library.delete("Tiny")
    shutil.rmtree(root / "speakers")
    import_voices(library, exported)
    assert np.array_equal(spoken(), before)
