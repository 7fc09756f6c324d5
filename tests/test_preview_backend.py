"""The preview engine (cosyvoice_mac/preview/backend.py): CosyVoice's interface, errors, seeds, cache, Mandarin."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac.errors import InputError
from cosyvoice_mac.frontend.prompt_audio import load_audio
from cosyvoice_mac.pipeline.types import SpeakerPrompt, SynthesisError, SynthesisResult

pytest.importorskip("piper")
pytest.importorskip("pyworld")

from cosyvoice_mac.preview import PREVIEW_LABEL, world_convert  # noqa: E402
from cosyvoice_mac.preview.backend import PreviewVoice  # noqa: E402
from cosyvoice_mac.preview.mandarin import MandarinSpeaker, MandarinUnavailable  # noqa: E402

SENTENCE = "Please bring the red book to the kitchen table."


@pytest.fixture(scope="module")
def voice():
    return PreviewVoice.from_pretrained(None, device="auto")


@pytest.fixture(scope="module")
def low_prompt(make_speech):
    return make_speech("A large size in stockings is hard to sell in the summer.", voice="en-us+m3")


@pytest.fixture(scope="module")
def high_prompt(make_speech):
    return make_speech("The boy was there when the sun rose over the quiet hills.", voice="en-us+f4")


@pytest.fixture(scope="module")
def high_speaker(voice, high_prompt):
    return voice.prepare_prompt(high_prompt, transcript="The boy was there when the sun rose.")


def _speak(voice, text=SENTENCE, **kwargs) -> list[SynthesisResult]:
    return list(voice.synthesize(text, **kwargs))


def _median_f0(samples: np.ndarray, rate: int) -> float:
    return world_convert.voice_stats(world_convert.analyse(samples, rate)).f0_hz


def test_has_the_cosyvoice_pipeline_interface(voice):
    assert voice.version == "preview" and voice.sample_rate == 24000
    assert voice.device == torch.device("cpu") and voice.dtype == torch.float32
    assert voice.to("mps") is voice and voice.device.type == "cpu"
    voice.use_vocoder(object())  # accepted and ignored
    assert "preview" in voice.model_id


def test_prompt_features_fit_the_speaker_cache(voice, high_prompt, high_speaker, tmp_path):
    from cosyvoice_mac.engine.cache import SpeakerCache

    assert isinstance(high_speaker, SpeakerPrompt)
    assert high_speaker.embedding.shape == (1, world_convert.STATS_VECTOR_SIZE)
    assert high_speaker.audio_hash == load_audio(high_prompt).content_hash
    assert high_speaker.model_id == voice.model_id and high_speaker.transcript.startswith("The boy")
    assert 1.0 < high_speaker.duration_s < 6.0
    cache = SpeakerCache(tmp_path)
    assert cache.put(high_speaker)
    restored, source = SpeakerCache(tmp_path).lookup(voice.model_id, high_speaker.audio_hash)
    assert source == "disk"
    fresh = _speak(voice, speaker=high_speaker, seed=7)[0].audio
    cached = _speak(voice, speaker=restored, seed=7)[0].audio
    np.testing.assert_array_equal(fresh, cached)


def test_microphone_samples_and_their_file_give_the_same_prompt(voice, high_prompt, high_speaker):
    samples, rate = soundfile.read(high_prompt, dtype="float32")
    from_samples = voice.prepare_prompt(np.stack([samples, samples], axis=1), sample_rate=rate)
    assert from_samples.audio_hash == high_speaker.audio_hash
    torch.testing.assert_close(from_samples.embedding, high_speaker.embedding)


def test_vad_trims_silence_around_the_prompt(voice, high_prompt, high_speaker, tmp_path):
    samples, rate = soundfile.read(high_prompt, dtype="float32")
    padded = np.concatenate([np.zeros(2 * rate, np.float32), samples, np.zeros(3 * rate, np.float32)])
    padded_prompt = voice.prepare_prompt(padded, sample_rate=rate)
    assert padded_prompt.duration_s == pytest.approx(high_speaker.duration_s, abs=0.15)
    assert padded_prompt.embedding[0, 0] == pytest.approx(float(high_speaker.embedding[0, 0]), abs=0.05)


def test_result_is_24khz_speech_labelled_as_preview(voice, high_speaker):
    results = _speak(
        voice, "Hello there. The weather is fine today, and the birds are singing.", speaker=high_speaker, seed=3
    )
    first = results[0]
    assert first.sample_rate == 24000 and first.audio.dtype == np.float32
    assert 1.0 < sum(r.duration_s for r in results) < 10.0
    assert np.abs(first.audio).max() <= 0.95 and np.sqrt(np.mean(first.audio**2)) > 0.02
    assert all(PREVIEW_LABEL in " ".join(r.notes) for r in results)
    assert [r.segment_index for r in results] == list(range(first.segment_count))
    assert first.seed == 3 and first.timings["tts"] > 0
    assert first.mode == "zero_shot"  # the prepared voice's transcript is honoured, as CosyVoice does


def test_output_pitch_follows_the_prompt(voice, low_prompt, high_speaker):
    low_speaker = voice.prepare_prompt(low_prompt)
    high = _speak(voice, speaker=high_speaker, seed=1)[0].audio
    low = _speak(voice, speaker=low_speaker, seed=1)[0].audio
    high_stats = world_convert.VoiceStats.from_vector(high_speaker.embedding[0].numpy())
    assert _median_f0(high, 24000) == pytest.approx(high_stats.f0_hz, rel=0.15)
    assert _median_f0(high, 24000) > 1.4 * _median_f0(low, 24000)


def test_seed_reproduces_and_speed_shortens(voice, high_speaker):
    first = _speak(voice, speaker=high_speaker, seed=11)[0]
    again = _speak(voice, speaker=high_speaker, seed=11)[0]
    other = _speak(voice, speaker=high_speaker, seed=12)[0]
    fast = _speak(voice, speaker=high_speaker, seed=11, speed=1.5)[0]
    np.testing.assert_array_equal(first.audio, again.audio)
    assert len(other.audio) != len(first.audio) or not np.array_equal(other.audio, first.audio)
    assert fast.duration_s == pytest.approx(first.duration_s / 1.5, rel=0.15)


def test_sentences_stream_one_by_one_and_stop_on_request(voice, high_speaker):
    long_text = " ".join(f"This is sentence number {n}, which is long enough to stand on its own." for n in range(8))
    results = []
    for result in voice.synthesize(
        long_text, speaker=high_speaker, seed=0, stream=True, should_stop=lambda: len(results) >= 1
    ):
        results.append(result)
    assert len(results) == 1 and results[0].segment_count > 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": "Hello there."}, "prompt voice is needed"),
        ({"text": "   ", "with_prompt": True}, "text to speak is empty"),
        ({"text": "Hello.", "with_prompt": True, "speed": 3.0}, "speed 3.0 is out of range"),
        ({"text": "[breath] [laughter]", "with_prompt": True}, "nothing to speak"),
        ({"text": "Hello <|en|> there.", "with_prompt": True}, "Unknown markup"),
    ],
)
def test_bad_requests_raise_before_any_audio(voice, high_speaker, kwargs, message):
    kwargs = dict(kwargs)
    text = kwargs.pop("text")
    if kwargs.pop("with_prompt", False):
        kwargs["speaker"] = high_speaker
    with pytest.raises(InputError, match=message):  # the request's rules, then the text front end's
        voice.synthesize(text, **kwargs)


def test_prompt_for_another_model_and_unusable_prompts_are_refused(voice, high_speaker, tmp_path):
    foreign = SpeakerPrompt(**{f.name: getattr(high_speaker, f.name) for f in fields(SpeakerPrompt)})
    foreign.model_id = "cosyvoice3-abc"
    with pytest.raises(SynthesisError, match="another model"):
        voice.synthesize("Hello.", speaker=foreign)
    with pytest.raises(SynthesisError, match="without their sample rate"):
        voice.prepare_prompt(np.zeros(16000, np.float32))
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(48000), 24000)
    with pytest.raises(SynthesisError, match="silent"):
        voice.prepare_prompt(silent)


def test_instruction_is_ignored_with_a_note(voice, high_speaker):
    result = _speak(voice, "Good morning.", speaker=high_speaker, instruct="Speak very slowly.", seed=0)[0]
    assert result.mode == "instruct" and any("instruction was ignored" in note for note in result.notes)


def test_chinese_text_uses_espeak_pinyin_voice(voice, high_speaker):
    try:
        MandarinSpeaker()
    except MandarinUnavailable as error:
        pytest.skip(str(error))
    result = _speak(voice, "今天天气很好，我们一起去公园散步吧。", speaker=high_speaker, seed=0)[0]
    assert 1.5 < result.duration_s < 8.0 and np.sqrt(np.mean(result.audio**2)) > 0.02
    high_stats = world_convert.VoiceStats.from_vector(high_speaker.embedding[0].numpy())
    assert _median_f0(result.audio, 24000) == pytest.approx(high_stats.f0_hz, rel=0.2)


def test_chinese_without_espeak_says_what_to_install(high_speaker, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    voice = PreviewVoice()
    with pytest.raises(SynthesisError, match="espeak-ng"):
        voice.synthesize("你好，世界。", speaker=high_speaker)


def test_a_prompt_too_short_or_too_long_is_refused_by_the_one_length_rule(voice, make_speech, tmp_path):
    """The preview voice measures the speech Silero keeps and judges it by ``limits.prompt_length_problem``
    with no tail (nothing is appended to a WORLD prompt): under 1 s too short, over 30 s too long."""
    speech, rate = soundfile.read(make_speech("Hi."), dtype="float32")
    short = tmp_path / "short.wav"
    soundfile.write(short, speech[: int(0.5 * rate)], rate)
    with pytest.raises(SynthesisError, match="a voice prompt needs at least 1 s"):
        voice.prepare_prompt(short)
    with pytest.raises(SynthesisError, match="the model takes at most 30 s"):
        voice.prepare_prompt(make_speech("This recording goes on and on and on.", seconds=35.0))


def test_the_preview_voice_keeps_to_the_workers_thread_budget():
    """The worker's --torch-threads is the preview voice's too (onnxruntime would take a pool of every core)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # as a worker started with --torch-threads 1 sets it
    try:
        options = PreviewVoice().english.voice.session.get_session_options()
    finally:
        torch.set_num_threads(previous)
    assert options.intra_op_num_threads == 1
