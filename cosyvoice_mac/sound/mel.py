"""Slaney's mel scale and its triangular filterbank, in numpy: ``librosa.filters.mel``'s and
``librosa.mel_frequencies``' operations written out (equal to the bit: tests/test_worker_footprint.py).

Importing librosa's filters pulls numba and scipy into the model worker (0.13 GB resident, which the 8 GB mode
cannot spare) and costs seconds of numba start-up in every worker that imports it: the CosyVoice frontend's
features and the preview voice's band statistics use these instead.
"""

from __future__ import annotations

import numpy as np

_MEL_STEP_HZ, _LOG_START_HZ, _LOG_STEP = 200.0 / 3, 1000.0, np.log(6.4) / 27.0  # Slaney's mel scale


def hz_to_slaney_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above. float64."""
    mels = hz / _MEL_STEP_HZ
    above = hz >= _LOG_START_HZ
    mels[above] = _LOG_START_HZ / _MEL_STEP_HZ + np.log(hz[above] / _LOG_START_HZ) / _LOG_STEP
    return mels


def slaney_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = _MEL_STEP_HZ * mels
    above = mels >= _LOG_START_HZ / _MEL_STEP_HZ
    hz[above] = _LOG_START_HZ * np.exp(_LOG_STEP * (mels[above] - _LOG_START_HZ / _MEL_STEP_HZ))
    return hz


def mel_frequencies(count: int, fmin: float, fmax: float) -> np.ndarray:
    """``count`` frequencies (Hz) evenly spaced on Slaney's mel scale from ``fmin`` to ``fmax``, as
    ``librosa.mel_frequencies(count, fmin=fmin, fmax=fmax)``."""
    return slaney_mel_to_hz(np.linspace(*hz_to_slaney_mel(np.array([fmin, fmax], dtype=np.float64)), count))


def mel_filters(
    sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None, area_norm: bool = True
) -> np.ndarray:
    """``librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)`` ``(n_mels, n_fft // 2 + 1)``
    float32: triangles on Slaney's scale, each scaled to unit area (``norm="slaney"``), or peaking at 1 when
    ``area_norm`` is False (``norm=None``)."""
    mel_hz = mel_frequencies(n_mels + 2, fmin, sr / 2 if fmax is None else fmax)
    widths = np.diff(mel_hz)
    ramps = np.subtract.outer(mel_hz, np.fft.rfftfreq(n=n_fft, d=1.0 / sr))
    rising, falling = -ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]
    filters = np.maximum(0, np.minimum(rising, falling)).astype(np.float32)
    if area_norm:
        filters *= 2.0 / (mel_hz[2 : n_mels + 2] - mel_hz[:n_mels])[:, None]
    return filters
