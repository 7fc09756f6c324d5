"""Post-processing of a finished waveform (off by default): silence trim and loudness normalisation.

Loudness is measured and set with pyloudnorm (ITU-R BS.1770 integrated loudness, in LUFS); a gain that
would clip is lowered so the peak stays at -1 dBFS, and the result says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosyvoice_mac.longform import LongformError

LUFS_RANGE = (-40.0, -5.0)
TRIM_TOP_DB = 40.0  # quieter than the loudest frame by this much counts as silence
PEAK_CEILING = 10 ** (-1.0 / 20)  # -1 dBFS
_MIN_LOUDNESS_S = 0.4  # BS.1770 gates 400 ms blocks: shorter audio has no integrated loudness


class PostError(LongformError):
    """Post-processing settings that cannot be used."""


@dataclass(frozen=True)
class PostSettings:
    """What to do to every output: ``trim`` leading/trailing silence, normalise to ``loudness_lufs``."""

    trim: bool = False
    loudness_lufs: float | None = None

    def __post_init__(self):
        if self.loudness_lufs is not None and not LUFS_RANGE[0] <= self.loudness_lufs <= LUFS_RANGE[1]:
            raise PostError(
                f"the loudness target must be {LUFS_RANGE[0]:g} to {LUFS_RANGE[1]:g} LUFS "
                f"(got {self.loudness_lufs:g}); -16 suits speech on the web, -23 broadcast"
            )

    @property
    def active(self) -> bool:
        return self.trim or self.loudness_lufs is not None


def trim_silence(wave: np.ndarray, sample_rate: int, keep_s: float = 0.02) -> np.ndarray:
    """``wave`` (T,) without leading and trailing silence, keeping ``keep_s`` of it at each edge."""
    import librosa

    if wave.size == 0 or not np.any(wave):
        return wave
    _, (start, end) = librosa.effects.trim(wave, top_db=TRIM_TOP_DB, frame_length=512, hop_length=128)
    keep = int(keep_s * sample_rate)
    return wave[max(0, start - keep) : min(wave.size, end + keep)]


def loudness(wave: np.ndarray, sample_rate: int) -> float | None:
    """Integrated loudness in LUFS, or None for audio too short or too quiet to measure."""
    import pyloudnorm

    if wave.size < _MIN_LOUDNESS_S * sample_rate:
        return None
    value = pyloudnorm.Meter(sample_rate).integrated_loudness(wave.astype(np.float64))  # cpu-only: numpy audio
    return float(value) if np.isfinite(value) else None


def normalize_loudness(wave: np.ndarray, sample_rate: int, target_lufs: float) -> tuple[np.ndarray, str]:
    """``wave`` at ``target_lufs`` (peak-limited to -1 dBFS) and a note saying what was done."""
    measured = loudness(wave, sample_rate)
    if measured is None:
        return wave, "loudness not changed: the audio is too short or silent to measure"
    gain = 10 ** ((target_lufs - measured) / 20)
    peak = float(np.max(np.abs(wave))) * gain
    note = f"loudness {measured:.1f} -> {target_lufs:.1f} LUFS"
    if peak > PEAK_CEILING:
        gain *= PEAK_CEILING / peak
        note += f" (held at {target_lufs - 20 * np.log10(peak / PEAK_CEILING):.1f} LUFS so it does not clip)"
    return (wave * gain).astype(np.float32), note


def post_process(wave: np.ndarray, sample_rate: int, settings: PostSettings) -> tuple[np.ndarray, list[str]]:
    """Apply ``settings`` to ``wave`` (T,); returns the new wave and notes for the sidecar."""
    notes = []
    if settings.trim:
        before = wave.size
        wave = trim_silence(wave, sample_rate)
        notes.append(f"trimmed {(before - wave.size) / sample_rate:.2f} s of silence")
    if settings.loudness_lufs is not None:
        wave, note = normalize_loudness(wave, sample_rate, settings.loudness_lufs)
        notes.append(note)
    return wave, notes
