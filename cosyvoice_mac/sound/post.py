"""Post-processing of a finished waveform (off by default): silence trim and loudness normalisation.

What to do is the request's ``PostSettings`` (``post_settings.py``, where its limits are checked); this
module does it, for every output: the worker applies it to each job before saving, ``synth`` before
writing, and the long-form runner to each line (loudness over a dub's whole timeline).

Loudness is measured and set with pyloudnorm (ITU-R BS.1770 integrated loudness, in LUFS); a gain that
would clip is lowered so the peak stays at -1 dBFS, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cosyvoice_mac.sound.post_settings import PostSettings
from cosyvoice_mac.sound.silence import sound_bounds

TRIM_TOP_DB = 40.0  # quieter than the loudest frame by this much counts as silence
TRIM_KEEP_S = 0.02  # silence kept at each trimmed edge, so a word's onset is never clipped
PEAK_CEILING = 10 ** (-1.0 / 20)  # -1 dBFS
_MIN_LOUDNESS_S = 0.4  # BS.1770 gates 400 ms blocks: shorter audio has no integrated loudness


@dataclass
class PostReport:
    """What ``post_process`` did: the settings, the silence cut at each edge (ms), the loudness measured
    before and after (LUFS, None when unmeasurable), whether the gain was held back to keep the peak at
    -1 dBFS, and the notes for the user."""

    settings: PostSettings
    trimmed_start_ms: float = 0.0
    trimmed_end_ms: float = 0.0
    measured_lufs: float | None = None
    output_lufs: float | None = None
    peak_limited: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The sidecar's ``post`` entry (plain JSON values)."""
        facts = self.settings.as_dict()
        if self.settings.trim:
            facts.update(trimmed_start_ms=self.trimmed_start_ms, trimmed_end_ms=self.trimmed_end_ms)
        if self.settings.loudness_lufs is not None:
            facts.update(
                target_lufs=self.settings.loudness_lufs,
                measured_lufs=self.measured_lufs,
                output_lufs=self.output_lufs,
                peak_limited=self.peak_limited,
            )
        return {**facts, "notes": list(self.notes)}


def trim_bounds(wave: np.ndarray, sample_rate: int, keep_s: float = TRIM_KEEP_S) -> tuple[int, int]:
    """``(start, end)`` of ``wave`` (T,) without its leading and trailing silence, ``keep_s`` kept at each edge."""
    if wave.size == 0 or not np.any(wave):
        return 0, wave.size
    start, end = sound_bounds(wave, TRIM_TOP_DB, frame_length=512, hop_length=128)  # librosa.effects.trim's
    keep = int(keep_s * sample_rate)
    return max(0, start - keep), min(wave.size, end + keep)


def trim_silence(wave: np.ndarray, sample_rate: int, keep_s: float = TRIM_KEEP_S) -> np.ndarray:
    """``wave`` (T,) without leading and trailing silence, keeping ``keep_s`` of it at each edge."""
    start, end = trim_bounds(wave, sample_rate, keep_s)
    return wave[start:end]


def loudness(wave: np.ndarray, sample_rate: int) -> float | None:
    """Integrated loudness in LUFS, or None for audio too short or too quiet to measure."""
    import pyloudnorm

    if wave.size < _MIN_LOUDNESS_S * sample_rate:
        return None
    value = pyloudnorm.Meter(sample_rate).integrated_loudness(wave.astype(np.float64))  # cpu-only: numpy audio
    return float(value) if np.isfinite(value) else None


def _normalize_loudness(wave: np.ndarray, sample_rate: int, target_lufs: float, report: PostReport) -> np.ndarray:
    """``wave`` at ``target_lufs`` (peak-limited to -1 dBFS); fills the report's loudness facts and note."""
    measured = loudness(wave, sample_rate)
    report.measured_lufs = None if measured is None else round(measured, 2)
    if measured is None:
        report.notes.append("loudness not changed: the audio is too short or silent to measure")
        return wave
    gain = 10 ** ((target_lufs - measured) / 20)
    peak = float(np.max(np.abs(wave))) * gain
    note = f"loudness {measured:.1f} -> {target_lufs:.1f} LUFS"
    output = target_lufs
    if peak > PEAK_CEILING:
        gain *= PEAK_CEILING / peak
        output = target_lufs - 20 * np.log10(peak / PEAK_CEILING)
        report.peak_limited = True
        note += f" (held at {output:.1f} LUFS so it does not clip)"
    report.output_lufs = round(float(output), 2)
    report.notes.append(note)
    return (wave * gain).astype(np.float32)


def post_process(wave: np.ndarray, sample_rate: int, settings: PostSettings) -> tuple[np.ndarray, PostReport]:
    """Apply ``settings`` to ``wave`` (T,); returns the new wave (``wave`` itself when nothing is asked)
    and the report of what was done."""
    report = PostReport(settings)
    if settings.trim:
        start, end = trim_bounds(wave, sample_rate)
        report.trimmed_start_ms = round(1000 * start / sample_rate, 3)  # to the sample at any rate up to 1 MHz
        report.trimmed_end_ms = round(1000 * (wave.size - end) / sample_rate, 3)
        report.notes.append(
            f"trimmed {report.trimmed_start_ms / 1000:.2f} s of silence at the start, "
            f"{report.trimmed_end_ms / 1000:.2f} s at the end"
        )
        wave = wave[start:end]
    if settings.loudness_lufs is not None:
        wave = _normalize_loudness(wave, sample_rate, settings.loudness_lufs, report)
    return wave, report
