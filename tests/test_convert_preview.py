"""Voice conversion with the preview voice (WORLD, no weights): the target's pitch and envelope, the source's
words and timing, in pieces without drift or clicks, labelled as an approximate match."""

from __future__ import annotations

import subprocess
from math import gcd
from shutil import which

import numpy as np
import pytest
import soundfile
from scipy.signal import resample_poly

from cosyvoice_mac.conversion_request import Recording
from cosyvoice_mac.frontend.source_audio import decode_source
from cosyvoice_mac.pipeline.types import SynthesisError
from cosyvoice_mac.preview import PREVIEW_LABEL, world_convert
from cosyvoice_mac.preview.backend import PreviewVoice

SENTENCES = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
)


@pytest.fixture(scope="module")
def voice() -> PreviewVoice:
    return PreviewVoice()


def _espeak(path, text: str, pitch: int) -> None:
    subprocess.run([which("espeak-ng"), "-p", str(pitch), "-w", str(path), text], check=True, capture_output=True)


@pytest.fixture(scope="module")
def high_prompt(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompt") / "high.wav"
    _espeak(path, "Hello there, this is a short prompt for testing. It speaks rather high.", pitch=95)
    return path


@pytest.fixture(scope="module")
def long_source(tmp_path_factory):
    """~35 s (two pieces; the 70 s case runs on CosyVoice's tiny model) of low-pitched espeak sentences with
    0.7 s pauses, at 22.05 kHz."""
    folder = tmp_path_factory.mktemp("long")
    parts, total = [], 0.0
    for index, text in enumerate(SENTENCES):
        _espeak(folder / f"{index}.wav", text, pitch=20)
    while total < 35.0:
        for index in range(len(SENTENCES)):
            speech, rate = soundfile.read(folder / f"{index}.wav", dtype="float32")
            parts += [speech, np.zeros(int(0.7 * rate), np.float32)]
            total += len(speech) / rate + 0.7
    path = folder / "long.wav"
    soundfile.write(path, np.concatenate(parts), rate)
    return path


def _median_f0(wave: np.ndarray, rate: int) -> float:
    f0 = world_convert.analyse(wave, rate).f0
    return float(np.median(f0[f0 > 0]))


def test_a_long_source_takes_the_targets_pitch_in_pieces_without_drift_or_clicks(voice, high_prompt, long_source):
    source = decode_source(Recording(audio=str(long_source)))
    results = list(voice.convert(str(long_source), str(high_prompt)))
    assert len(results) == len(source.pieces) >= 2
    assert all(PREVIEW_LABEL in " ".join(r.notes) and r.mode == "voice_conversion" for r in results)
    audio = np.concatenate([r.audio for r in results])
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 0.95 + 1e-6
    assert abs(len(audio) - source.wave_16k.shape[1] * 1.5) <= 960 * len(results)
    for join in np.cumsum([len(r.audio) for r in results])[:-1]:
        rms = float(np.sqrt(np.mean(audio[join - 480 : join + 480] ** 2)))
        assert abs(float(audio[join]) - float(audio[join - 1])) <= 5 * rms + 1e-6
        assert audio[join - 1] == 0.0 and audio[join] == 0.0  # both sides faded into the pause
    piece = results[0].audio
    original, rate = soundfile.read(long_source, dtype="float32")
    before = _median_f0(original[: 5 * rate], rate)
    target = _median_f0(soundfile.read(high_prompt, dtype="float32")[0], 22050)
    after = _median_f0(piece[: 5 * 24000], 24000)
    assert abs(np.log(after / target)) < 0.5 * abs(np.log(before / target))  # moved most of the way


def test_stereo_8_and_48_khz_sources_convert_to_their_length(voice, high_prompt, tmp_path):
    _espeak(tmp_path / "s.wav", SENTENCES[0], pitch=30)
    speech, rate = soundfile.read(tmp_path / "s.wav", dtype="float32")
    for target_rate, channels in ((8000, 1), (48000, 2)):
        divisor = gcd(rate, target_rate)
        samples = resample_poly(speech, target_rate // divisor, rate // divisor).astype(np.float32)
        if channels == 2:
            samples = np.stack([samples, samples], axis=1)
        results = list(voice.convert(samples, str(high_prompt), sample_rate=target_rate))
        audio = np.concatenate([r.audio for r in results])
        assert abs(len(audio) - len(samples) / target_rate * 24000) <= 960 and np.isfinite(audio).all()


def test_same_input_same_output_and_speed(voice, high_prompt, tmp_path):
    _espeak(tmp_path / "s.wav", SENTENCES[1], pitch=30)
    first = np.concatenate([r.audio for r in voice.convert(str(tmp_path / "s.wav"), str(high_prompt))])
    again = np.concatenate([r.audio for r in voice.convert(str(tmp_path / "s.wav"), str(high_prompt))])
    assert np.array_equal(first, again)
    fast = np.concatenate([r.audio for r in voice.convert(str(tmp_path / "s.wav"), str(high_prompt), speed=2.0)])
    assert abs(len(fast) - len(first) / 2) <= 1


def test_silence_and_noise_are_refused(voice, high_prompt, tmp_path):
    soundfile.write(tmp_path / "silent.wav", np.zeros(48000, np.float32), 16000)
    with pytest.raises(SynthesisError, match="silent"):
        list(voice.convert(str(tmp_path / "silent.wav"), str(high_prompt)))
    noise = 0.3 * np.random.default_rng(1).standard_normal(48000).astype(np.float32)
    with pytest.raises(SynthesisError, match="no speech to convert"):
        list(voice.convert(noise, str(high_prompt), sample_rate=16000))
