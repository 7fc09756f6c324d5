"""The speaker encoder's Kaldi fbank on a prompt with silence and a quiet passage, step by step.

Every step (DC removal, pre-emphasis repeating each frame's first sample, the Povey window, the
512-point power spectrum, the 80 HTK mel filters built in float32 as torchaudio builds them, the
natural log floored at float32 eps) is recomputed here in float64 with numpy, independently of
``features.py``. On this kind of prompt our float32 fbank was found bit-identical to the reference's
own code (torchaudio 2.11 ``kaldi.fbank`` after its ``Resample``, run on the same machine); what
remains against a float64 computation is float32 rounding, mostly the FFT's (up to ~5e-4 in the log
energy of bins 1e9 times weaker than their frame, where the golden vectors of another CPU differ by
as much). So the bounds are: 5e-5 where a bin holds at least 1e-5 of its frame's energy, 2e-3 in the
weak bins, and exactly log(eps) in digital silence.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac.frontend import features
from cosyvoice_mac.frontend.features import kaldi_fbank
from cosyvoice_mac.frontend.resample import resample

FLOAT32_EPS = float(np.finfo(np.float32).eps)


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
def quiet_prompt(make_speech) -> np.ndarray:
    """16 kHz float32: 0.5 s of digital silence, a sentence, 0.3 s silence, the sentence at -50 dB, 0.5 s silence."""
    samples, rate = soundfile.read(make_speech("The quick brown fox. It rests now, very quietly."), dtype="float32")
    gap = lambda seconds: np.zeros(int(seconds * rate), np.float32)  # noqa: E731
    wave = np.concatenate([gap(0.5), samples, gap(0.3), samples * 0.003, gap(0.5)])
    return resample(torch.from_numpy(wave)[None], rate, 16000)[0].numpy()


def test_the_filters_are_the_htk_mel_triangles():
    ours = features._kaldi_mel_banks(80).double().numpy()
    assert ours.shape == (80, 257) and not ours[:, 256].any()
    assert np.abs(ours - _htk_banks_like_torchaudio()).max() < 5e-5  # float32 rounding of the grid


def test_fbank_of_a_prompt_with_silence_and_a_quiet_passage_follows_every_step(quiet_prompt):
    ours = kaldi_fbank(torch.from_numpy(quiet_prompt)[None]).double().numpy()
    expected, energies = _fbank_float64(quiet_prompt, features._kaldi_mel_banks(80).double().numpy())
    assert ours.shape == expected.shape
    strong = energies >= 1e-5 * energies.sum(axis=1, keepdims=True)
    assert 0.3 < strong.mean() < 0.9  # both kinds of bins are present
    assert np.abs(ours - expected)[strong].max() < 5e-5
    assert np.abs(ours - expected).max() < 2e-3
    silent = np.all(energies == 0.0, axis=1)
    assert silent.sum() >= 40  # the padding: frames of digital silence
    assert np.all(ours[silent] == np.float32(np.log(np.float32(FLOAT32_EPS))))


def test_mean_normalised_copy_removes_the_utterance_mean(quiet_prompt):
    from cosyvoice_mac.frontend.speaker import normalised_fbank

    fbank = kaldi_fbank(torch.from_numpy(quiet_prompt)[None])
    normalised = normalised_fbank(torch.from_numpy(quiet_prompt)[None])
    assert torch.allclose(normalised, fbank - fbank.mean(dim=0, keepdim=True), atol=0, rtol=0)
