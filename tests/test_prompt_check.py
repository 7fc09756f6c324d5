"""The quick look at a prompt (page, API, CLI): length, silence, not-audio, limits, without torch in the UI process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.frontend import prompt_audio
from cosyvoice_mac.sound.limits import prompt_length_problem
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.prompt_check import inspect_prompt, judge_samples


def test_the_page_check_stays_torch_free():
    """The page process judges prompts with the worker's limits without importing torch."""
    code = "import sys, cosyvoice_mac.sound.prompt_check; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_speech_is_measured_like_the_worker_trims_it(make_speech, tmp_path):
    speech, rate = soundfile.read(make_speech("Measure this sentence for me, please.", seconds=4.0), dtype="float32")
    padded = np.concatenate([np.zeros(rate), speech, np.zeros(2 * rate)]).astype(np.float32)
    path = tmp_path / "padded.wav"
    soundfile.write(path, padded, rate)
    check = inspect_prompt(path)
    assert check.ok, check
    assert check.seconds == pytest.approx(7.0, abs=0.01)
    kept = prompt_audio.load_audio(path, normalize=False).seconds  # what the worker keeps after trimming
    assert check.speech_seconds == pytest.approx(kept, abs=0.05)


def test_flac_and_mp3_uploads_are_read(make_speech, tmp_path):
    speech, rate = soundfile.read(make_speech("A prompt in another container.", seconds=3.0), dtype="float32")
    for name, options in (("p.flac", {}), ("p.mp3", {"format": "MP3"})):
        soundfile.write(tmp_path / name, speech, rate, **options)
        check = inspect_prompt(tmp_path / name)
        assert check.ok and check.seconds == pytest.approx(3.0, abs=0.1), (name, check)


def test_a_text_file_is_not_audio(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("meeting notes\n")
    assert inspect_prompt(path).problem == "not_audio"
    assert inspect_prompt(path).details["name"] == "notes.wav"


def test_silence_too_long_too_short_and_low_rate_are_named(make_speech, tmp_path):
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(16000 * 3, np.float32), 16000)
    assert inspect_prompt(silent).problem == "silent"

    long = inspect_prompt(make_speech("This recording goes on and on and on.", seconds=35.0))
    assert long.problem == "too_long" and long.details["limit"] == pytest.approx(29.8)

    speech, rate = soundfile.read(make_speech("Hi."), dtype="float32")
    short = tmp_path / "short.wav"
    soundfile.write(short, speech[: int(0.5 * rate)], rate)
    assert inspect_prompt(short).problem == "too_short"

    phone = inspect_prompt(make_speech("Phone quality speech here.", seconds=3.0, sample_rate=8000))
    assert phone.problem == "low_rate" and phone.details["rate"] == 8000


def test_an_m4a_without_a_decoder_is_explained(tmp_path, monkeypatch):
    path = tmp_path / "voice.m4a"
    path.write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(200))
    import audioread

    def no_backend(*args, **kwargs):
        raise audioread.NoBackendError()

    monkeypatch.setattr(audioread, "audio_open", no_backend)
    raw_only = [backend for backend in audioread.available_backends() if backend.__name__ == "RawAudioFile"]
    monkeypatch.setattr(audioread, "available_backends", lambda: raw_only)  # no platform decoder here
    assert inspect_prompt(path).problem == "no_decoder"


def test_the_ui_modules_do_not_import_torch():
    code = (
        "import sys; import cosyvoice_mac.webui.callbacks, cosyvoice_mac.webui.layout, cosyvoice_mac.webui.page; "
        "from cosyvoice_mac.webui.features import detect_features; detect_features(); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_wav_with_invalid_samples_is_named_like_the_worker_names_it(make_speech, tmp_path, bad):
    """A float WAV holding NaN or infinity used to crash the check (``index -1 is out of bounds``)."""
    speech, rate = soundfile.read(make_speech("Invalid samples in the middle.", seconds=3.0), dtype="float32")
    speech[rate : rate + 10] = bad
    path = tmp_path / "bad.wav"
    soundfile.write(path, speech, rate, subtype="FLOAT")
    check = inspect_prompt(path)
    assert check.problem == "invalid_samples"
    from cosyvoice_mac.webui.render import render_prompt_check

    with pytest.raises(AudioInputError) as worker_says:
        prompt_audio.decode_audio(path)
    assert str(worker_says.value) in render_prompt_check("en", check)  # one check, one message


def test_an_empty_file_is_called_empty_as_the_worker_calls_it(tmp_path):
    path = tmp_path / "nothing.wav"
    path.write_bytes(b"")
    check = inspect_prompt(path)
    assert check.problem == "empty"
    from cosyvoice_mac.webui.render import render_prompt_check

    with pytest.raises(AudioInputError) as worker_says:
        prompt_audio.decode_audio(path)
    assert str(worker_says.value) in render_prompt_check("en", check)


def test_an_upload_that_is_gone_is_called_gone_not_not_audio(tmp_path):
    check = inspect_prompt(tmp_path / "deleted-by-the-temp-bound.wav")
    assert check.problem == "missing"
    from cosyvoice_mac.webui.render import render_prompt_check

    assert "no longer on the server" in render_prompt_check("en", check)


def _tone_between_silences(rate: int, sound_s: float) -> np.ndarray:
    """``sound_s`` of a 220 Hz tone with half a second of silence on each side: the trim keeps about the tone."""
    silence = np.zeros(rate // 2, np.float32)
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(round(sound_s * rate)) / rate)
    return np.concatenate([silence, tone.astype(np.float32), silence])


def _worker_verdict(samples: np.ndarray, rate: int, at: int):
    try:
        prompt_audio.decode_prompt(samples, rate).at(at)
    except AudioInputError as refused:
        return refused.problem, refused.details["limit"]
    return None


@pytest.mark.parametrize("sound_s", [0.5, 0.97, 0.985, 1.0, 1.03, 5.0, 29.75, 29.78, 29.8, 29.82, 29.9, 30.5])
def test_the_page_and_the_worker_give_one_verdict_on_one_prompt(sound_s):
    """The page's early check and the worker judge a prompt's length by one rule (``limits.prompt_length_problem``)
    on the speech the same trim keeps, so near either limit they agree: too short, fine, or too long."""
    samples = _tone_between_silences(16000, sound_s)
    page = judge_samples(samples, 16000, "p.wav")
    said = None if page.ok else (page.problem, page.details["limit"])
    assert said == _worker_verdict(samples, 16000, 16000)
    assert said == prompt_length_problem(page.speech_seconds)


@pytest.mark.parametrize("sound_s", [0.5, 1.2, 29.5, 30.2])
def test_the_verdict_holds_at_the_rates_a_prompt_is_read_at(sound_s):
    """Away from the limits by more than a trim frame, a 48 kHz upload gets the worker's verdict at 16 and 24 kHz."""
    samples = _tone_between_silences(48000, sound_s)
    page = judge_samples(samples, 48000, "p.wav")
    said = None if page.ok else (page.problem, page.details["limit"])
    assert said == _worker_verdict(samples, 48000, 16000)
    worker_24k = _worker_verdict(samples, 48000, 24000)
    assert said == (worker_24k if worker_24k is None else (worker_24k[0], pytest.approx(worker_24k[1])))


def test_the_length_rule():
    assert prompt_length_problem(0.99) == ("too_short", 1.0) and prompt_length_problem(1.0) is None
    assert prompt_length_problem(29.8) is None and prompt_length_problem(29.81) == ("too_long", pytest.approx(29.8))
    assert prompt_length_problem(29.9, tail_seconds=0.0) is None  # nothing appended: the whole 30 s is speech
    assert prompt_length_problem(0.2, min_seconds=None) is None
    assert prompt_length_problem(99.0, max_seconds=None) is None
