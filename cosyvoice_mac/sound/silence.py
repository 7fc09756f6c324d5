"""Where the sound is in a waveform: numpy only, so the page process, the model worker and long-form
post-processing share one rule without importing torch or librosa."""

from __future__ import annotations

import numpy as np


def sound_bounds(samples: np.ndarray, top_db: float, frame_length: int, hop_length: int) -> tuple[int, int]:
    """First and last+1 sample of the sound in ``samples`` (N,): ``librosa.effects.trim``'s indices.

    librosa's operations written out (equal results: tests/test_worker_footprint.py), because importing
    ``librosa.effects`` pulls numba, scipy, scikit-learn and pandas into the model worker: 0.18 GB of
    resident memory, which the 8 GB mode cannot spare. Frames of ``frame_length`` every ``hop_length``
    (zero-padded, centred); a frame is sound when its mean power is within ``top_db`` of the loudest.
    """
    padded = np.pad(samples, frame_length // 2)
    windows = np.lib.stride_tricks.sliding_window_view(padded, frame_length)
    frames = np.moveaxis(windows, -1, -2)[..., ::hop_length]  # (frame length, frames), as librosa frames
    power = np.sqrt(np.mean(frames**2, axis=-2)) ** 2
    decibels = 10.0 * np.log10(np.maximum(1e-10, power)) - 10.0 * np.log10(np.maximum(1e-10, power.max()))
    sound = np.flatnonzero(decibels > -top_db)
    if sound.size == 0:
        return 0, 0
    return int(sound[0]) * hop_length, min(samples.shape[-1], (int(sound[-1]) + 1) * hop_length)
