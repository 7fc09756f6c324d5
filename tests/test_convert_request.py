"""The voice-conversion contract: ``ConversionRequest`` (request.py) and the quick source check (sound/)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.conversion_request import VOICE_CONVERSION, ConversionRequest, Recording
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import PostSettings, Voice
from cosyvoice_mac.sound.limits import MAX_CONVERT_SECONDS
from cosyvoice_mac.sound.problems import AudioInputError, sentence
from cosyvoice_mac.sound.source_check import inspect_source, judge_source


def _tone_speech(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    """Syllable-rhythm harmonic tone: sound by the energy rule (the speech detector is the worker's)."""
    t = np.arange(int(rate * seconds)) / rate
    wave = 0.2 * np.sin(2 * np.pi * 150 * t) * (0.2 + 0.8 * np.sin(2 * np.pi * 3 * t) ** 2)
    return np.repeat(wave[:, None], channels, axis=1).astype(np.float32) if channels > 1 else wave.astype(np.float32)


def test_build_from_a_path_keeps_no_text_and_records_the_mode(tmp_path):
    path = tmp_path / "in.wav"
    soundfile.write(path, _tone_speech(16000, 2.0), 16000)
    request = ConversionRequest.build(str(path), Voice.saved_voice("Ada", transcript="dropped"), speed=1.25)
    assert request.mode == VOICE_CONVERSION and request.text == "" and request.seed == 0
    assert request.voice.transcript is None and request.voice.saved == "Ada"
    assert request.facts() == {
        "text": "",
        "mode": "voice_conversion",
        "source": "in.wav",
        "voice": "Ada",
        "speed": 1.25,
        "stream": False,
    }


def test_build_from_stereo_samples_at_any_rate():
    request = ConversionRequest.build(_tone_speech(48000, 1.0, channels=2), Voice.builtin(), sample_rate=48000)
    assert request.source.samples.shape == (48000, 2) and request.source.name == "the recording"


@pytest.mark.parametrize(
    ("kwargs", "field", "code"),
    [
        ({"source": "/no/such/file.wav"}, "source", "source_missing"),
        ({"source": np.zeros(0, np.float32), "sample_rate": 16000}, "source", "source_samples"),
        ({"source": np.zeros(10, np.float32), "sample_rate": None}, "source", "source_samples"),
        ({"source": None}, "source", "source_needed"),
        ({"voice": None}, "voice", "prompt_needed"),
        ({"speed": 3.0}, "speed", "speed_invalid"),
        ({"speed": 1.5, "stream": True}, "speed", "speed_stream"),
        ({"post": PostSettings(loudness_lufs=-16.0), "speed": float("nan")}, "speed", "speed_invalid"),
    ],
)
def test_bad_fields_are_named(kwargs, field, code):
    arguments = {"source": np.ones(1600, np.float32) * 0.1, "voice": Voice.builtin(), "sample_rate": 16000, **kwargs}
    source = arguments.pop("source")
    voice = arguments.pop("voice")
    with pytest.raises(RequestError) as caught:
        ConversionRequest.build(source, voice, **arguments)
    assert (caught.value.field, caught.value.code) == (field, code)


def test_a_recording_built_by_hand_is_checked_too():
    with pytest.raises(RequestError, match="upload or record someone speaking"):
        ConversionRequest(source=Recording(), voice=Voice.builtin())


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (16000, 2), (44100, 1), (48000, 2)])
def test_the_source_check_accepts_speech_at_common_rates_mono_or_stereo(tmp_path, rate, channels):
    path = tmp_path / f"in-{rate}-{channels}.wav"
    soundfile.write(path, _tone_speech(rate, 3.0, channels), rate)
    check = inspect_source(path)
    assert check.ok, check.sentence
    assert check.seconds == pytest.approx(3.0) and check.speech_seconds > 2.0


def test_the_source_check_refuses_silence_low_rates_and_empty_files(tmp_path):
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(32000, np.float32), 16000)
    assert inspect_source(silent).problem == "silent"
    assert "silent" in inspect_source(silent).sentence
    low = tmp_path / "low.wav"
    soundfile.write(low, _tone_speech(4000, 2.0), 4000)
    check = inspect_source(low)
    assert check.problem == "source_low_rate" and "at least 8000 Hz" in check.sentence
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    assert inspect_source(empty).problem == "empty"
    click = np.zeros(32000, np.float32)
    click[100:200] = 0.5
    assert judge_source(click, 16000, "click.wav").problem == "too_little_speech"


def test_a_source_over_the_file_limit_is_said_in_minutes():
    check = judge_source(np.zeros((int(MAX_CONVERT_SECONDS + 1) * 8000, 1), np.float32), 8000, "long.wav")
    assert check.problem == "source_too_long" and "10 minutes" in check.sentence


def test_no_speech_has_a_sentence_for_the_worker():
    error = AudioInputError("no_speech", name="noise.wav")
    assert str(error) == sentence("no_speech", {"name": "noise.wav"}) and "no speech" in str(error)


def test_the_pages_words_for_a_source_problem_are_the_sentence_the_api_and_cli_say():
    from cosyvoice_mac.sound.problems import SOURCE_PROBLEMS, SOURCE_SENTENCES
    from cosyvoice_mac.webui.strings_convert import EN

    assert {f"vc_problem_{problem}" for problem in SOURCE_PROBLEMS} <= set(EN)
    for problem in SOURCE_PROBLEMS:
        assert EN[f"vc_problem_{problem}"] == SOURCE_SENTENCES[problem]
