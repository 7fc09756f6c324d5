"""The speaker encoder's Kaldi fbank against an independent float64 oracle, on quiet, loud, short and long prompts.

The reference is torchaudio's ``kaldi.fbank`` (num_mel_bins=80, dither=0), which computes in its
input's dtype. Fed float32, every rounding (DC removal, pre-emphasis, window, FFT) adds about eps times
a frame's amplitude to each bin, and a mel bin 1e8 to 1e10 times weaker than its frame (the high bands
of loud speech) comes out up to ~1e-3 off in log energy, differently on each CPU: the golden vectors
themselves are 6.7e-4 off the exact values in 51 of their 23840 bins. That, not the mean over frames,
dither, the window's shape or the floor, was the 1.32e-3 gap on a quiet prompt. ``kaldi_fbank`` now
computes in float64, so it is the reference's exact value; here every step (DC removal, pre-emphasis
repeating each frame's first sample, the Povey window, the 512-point power spectrum, the natural log
floored at float32 eps, the mean over frames) is recomputed with numpy in float64, independently of
``features.py``, and both the fbank and its mean-normalised copy must agree within the manifest's
frontend tolerance (atol 1e-4, no relative slack) on every prompt.

The 80 mel filters are float32 numbers in the reference (built with torch's float32 log, which
differs from numpy's by an ulp here and there), so the oracle takes them as a matrix, checked on its
own against the HTK mel triangles.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac.frontend import features
from cosyvoice_mac.frontend.features import kaldi_fbank
from cosyvoice_mac.frontend.speaker import normalised_fbank
from tests.parity.common import TOLERANCE

FLOAT32_EPS = float(np.finfo(np.float32).eps)
ATOL = TOLERANCE["frontend"]["atol"]  # the manifest's fp32 frontend tolerance
SENTENCE = "The quick brown fox. It rests now, very quietly."


def _fbank_float64(wave16k: np.ndarray, banks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log energies (T, 80), energies (T, 80)) of Kaldi's fbank with dither 0, in float64."""
    count = 1 + (wave16k.size - 400) // 160
    frames = np.stack([wave16k[i * 160 : i * 160 + 400] for i in range(count)]).astype(np.float64)
    frames -= frames.mean(axis=1, keepdims=True)
    frames = frames - 0.97 * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    povey = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 399)) ** 0.85
    power = np.abs(np.fft.rfft(np.pad(frames * povey, ((0, 0), (0, 112))), axis=1)) ** 2
    energies = power @ banks.T
    return np.log(np.maximum(energies, FLOAT32_EPS)), energies


def _htk_banks_like_torchaudio() -> np.ndarray:
    """The 80 triangular filters (80, 257), from the HTK mel formula with float32 grid points."""
    mel = lambda hz: 1127.0 * np.log(1.0 + hz / 700.0)  # noqa: E731
    low, delta = mel(20.0), (mel(8000.0) - mel(20.0)) / 81
    grid = (1127.0 * np.log1p(np.float32(16000 / 512) * np.arange(256, dtype=np.float32) / np.float32(700))).astype(
        np.float32
    )
    banks = np.zeros((80, 257))
    for index in range(80):
        left, centre, right = (np.float32(low + (index + k) * delta) for k in range(3))
        banks[index, :256] = np.maximum(
            0.0, np.minimum((grid - left) / (centre - left), (right - grid) / (right - centre))
        )
    return banks


@pytest.fixture(scope="module")
def sentence16k(make_speech) -> np.ndarray:
    samples, rate = soundfile.read(make_speech(SENTENCE, sample_rate=16000), dtype="float32")
    assert rate == 16000
    return samples


@pytest.fixture(scope="module")
def prompts(make_speech, sentence16k) -> dict[str, np.ndarray]:
    """16 kHz float32 prompts: each one a kind of audio a user may record."""
    gap = lambda seconds: np.zeros(int(seconds * 16000), np.float32)  # noqa: E731
    voiced = int(np.argmax(np.abs(sentence16k) > 0.1))  # the first loud sample: frames of speech
    long_speech, _ = soundfile.read(make_speech(SENTENCE, seconds=30.0, sample_rate=16000), dtype="float32")
    return {
        # digital silence, the sentence, silence, the sentence at -50 dB, silence
        "quiet": np.concatenate([gap(0.5), sentence16k, gap(0.3), sentence16k * 0.003, gap(0.5)]),
        "loud": (sentence16k * (0.99 / np.abs(sentence16k).max())).astype(np.float32),
        "short, one frame": sentence16k[voiced : voiced + 400].copy(),
        "short, two frames": sentence16k[voiced : voiced + 560].copy(),
        "long, 30 s": long_speech,
    }


@pytest.fixture(scope="module")
def banks() -> np.ndarray:
    return features._kaldi_mel_banks(80).double().numpy()


def test_the_filters_are_the_htk_mel_triangles():
    ours = features._kaldi_mel_banks(80).double().numpy()
    assert ours.shape == (80, 257) and not ours[:, 256].any()
    assert np.abs(ours - _htk_banks_like_torchaudio()).max() < 5e-5  # float32 rounding of the grid


@pytest.mark.parametrize("kind", ["quiet", "loud", "short, one frame", "short, two frames", "long, 30 s"])
def test_fbank_and_its_mean_normalised_copy_reach_the_float64_reference(prompts, banks, kind):
    wave = prompts[kind]
    expected, energies = _fbank_float64(wave, banks)
    ours = kaldi_fbank(torch.from_numpy(wave)[None])
    normalised = normalised_fbank(torch.from_numpy(wave)[None])
    assert ours.dtype == normalised.dtype == torch.float32
    assert ours.shape == expected.shape == (1 + (wave.size - 400) // 160, 80)
    assert np.abs(ours.double().numpy() - expected).max() < ATOL, kind
    error = np.abs(normalised.double().numpy() - (expected - expected.mean(axis=0, keepdims=True)))
    assert error.max() < ATOL, f"{kind}: mean-normalised fbank {error.max():.2e} off the float64 reference"
    if kind in ("quiet", "loud", "long, 30 s"):  # the bins float32 arithmetic got wrong are there
        live = energies > FLOAT32_EPS
        assert (energies[live] < 1e-8 * energies.sum(axis=1, keepdims=True).repeat(80, 1)[live]).sum() >= 10


def test_digital_silence_is_the_float32_eps_floor(prompts, banks):
    wave = prompts["quiet"]
    _, energies = _fbank_float64(wave, banks)
    silent = np.all(energies == 0.0, axis=1)
    assert silent.sum() >= 40  # the padding: frames of digital silence
    ours = kaldi_fbank(torch.from_numpy(wave)[None]).numpy()
    assert np.all(ours[silent] == np.float32(np.log(np.float32(FLOAT32_EPS))))
