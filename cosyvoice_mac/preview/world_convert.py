"""Move a base voice toward a prompt voice with the WORLD vocoder (pyworld): pitch, envelope statistics, formants.

What is transferred, measured on the prompt once (:func:`voice_stats`, the cacheable part):

* pitch level and range: mean and standard deviation of log-F0 over voiced frames;
* spectral-envelope statistics: mean and standard deviation of the log power in 40 mel bands over speech
  frames (bands above the recording's bandwidth are marked invalid and left to the base voice);
* a formant warp ``sp'(f) = sp(f / alpha)``: the alpha in WARP_GRID whose warped base-voice long-term
  spectrum has the shape (level and tilt removed, 200-5000 Hz) closest to the prompt's.

Each synthesised sentence is analysed (DIO + StoneMask F0, CheapTrick, D4C), its log-F0 and band log
powers are mapped from the base voice's statistics to the prompt's, and it is resynthesised at 24 kHz.
Prosody, accent and speaking style are not transferred: this is an approximation, and is labelled so.
All arrays here are numpy on the CPU (pyworld works in float64).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np
from scipy.signal import resample_poly

from cosyvoice_mac.sound.mel import mel_filters, mel_frequencies
from cosyvoice_mac.versions import SAMPLE_RATE

ANALYSIS_RATE = SAMPLE_RATE  # the rate we analyse and resynthesise at: CosyVoice's output rate
F0_RATE = 16000  # F0 is tracked on a 16 kHz copy: same frame times, half the cost
FRAME_PERIOD_MS = 5.0
F0_FLOOR, F0_CEIL = 60.0, 600.0
ENVELOPE_F0_FLOOR = 71.0  # CheapTrick's default: gives a 1024-point FFT at 24 kHz (513 bins)
BAND_COUNT = 40
BAND_FMIN, BAND_FMAX = 50.0, ANALYSIS_RATE / 2
SPEECH_RANGE = np.log(10.0**4.5)  # frames within 45 dB of the loud end count as speech
WARP_GRID = np.round(np.arange(0.85, 1.2501, 0.025), 3)
WARP_FIT_HZ = (200.0, 5000.0)  # where formants dominate the long-term spectrum
STD_RATIO_RANGE = (0.5, 2.0)
Z_CLIP = 2.5  # band powers further than this many deviations from the mean are shifted, not stretched
MAX_GAIN = np.log(10.0**3.0)  # at most 30 dB of envelope change per band
BASE_FRAME_STRIDE = 3  # statistics of the base voice need every third frame only
MIN_VOICED_FRAMES = 20  # 0.1 s of voicing: less than that is not a voice to copy
STATS_VECTOR_SIZE = 4 + 2 * BAND_COUNT


class ConversionError(ValueError):
    """A recording that gives no usable voice statistics (no voiced speech found)."""


@dataclass(frozen=True)
class VoiceStats:
    """What the conversion keeps of one voice.

    band_mean, band_std: (BAND_COUNT,) natural-log band power statistics over speech frames.
    valid_bands: the first ``valid_bands`` bands lie inside the recording's bandwidth.
    """

    log_f0_mean: float
    log_f0_std: float
    band_mean: np.ndarray
    band_std: np.ndarray
    valid_bands: int
    voiced_seconds: float

    @property
    def f0_hz(self) -> float:
        return float(np.exp(self.log_f0_mean))

    def to_vector(self, dtype=np.float32) -> np.ndarray:
        """(STATS_VECTOR_SIZE,): [log-F0 mean, log-F0 std, valid bands, voiced s, means, stds]."""
        head = [self.log_f0_mean, self.log_f0_std, float(self.valid_bands), self.voiced_seconds]
        return np.concatenate([head, self.band_mean, self.band_std]).astype(dtype)

    @classmethod
    def from_vector(cls, vector) -> "VoiceStats":
        values = np.asarray(vector, dtype=np.float64).reshape(-1)
        if values.shape[0] != STATS_VECTOR_SIZE or not np.isfinite(values).all():
            raise ConversionError(
                f"voice statistics must be {STATS_VECTOR_SIZE} finite numbers, "
                f"got {values.shape[0]}; prepare the prompt again"
            )
        return cls(
            float(values[0]),
            float(values[1]),
            values[4 : 4 + BAND_COUNT].copy(),
            values[4 + BAND_COUNT :].copy(),
            int(round(values[2])),
            float(values[3]),
        )


@dataclass(frozen=True)
class WorldFrames:
    """WORLD analysis of one recording at ANALYSIS_RATE, one row per 5 ms frame.

    f0: (T,) Hz, 0 where unvoiced; envelope, aperiodicity: (T, fft_size // 2 + 1).
    """

    f0: np.ndarray
    envelope: np.ndarray
    aperiodicity: np.ndarray


def analyse(samples: np.ndarray, sample_rate: int, *, accurate_f0: bool = False) -> WorldFrames:
    """WORLD features of mono ``samples``; ``accurate_f0`` uses Harvest (slower, fewer voicing errors)."""
    import pyworld

    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if len(samples) < sample_rate // 10:  # WORLD needs a few frames; pad a blip out to 0.1 s
        samples = np.pad(samples, (0, sample_rate // 10 - len(samples)))
    wave = _resample(samples, sample_rate, ANALYSIS_RATE)
    wave_f0 = _resample(samples, sample_rate, F0_RATE)
    if accurate_f0:
        f0, times = pyworld.harvest(wave_f0, F0_RATE, f0_floor=F0_FLOOR, f0_ceil=F0_CEIL, frame_period=FRAME_PERIOD_MS)
    else:
        f0, times = pyworld.dio(wave_f0, F0_RATE, f0_floor=F0_FLOOR, f0_ceil=F0_CEIL, frame_period=FRAME_PERIOD_MS)
        f0 = pyworld.stonemask(wave_f0, f0, times, F0_RATE)
    # Frame times are the same at both rates; the 24 kHz copy may hold one frame more or less.
    frames = int(len(wave) / ANALYSIS_RATE * 1000 / FRAME_PERIOD_MS) + 1
    f0, times = _fit_length(f0, frames), np.arange(frames) * FRAME_PERIOD_MS / 1000
    fft_size = pyworld.get_cheaptrick_fft_size(ANALYSIS_RATE, ENVELOPE_F0_FLOOR)
    envelope = pyworld.cheaptrick(wave, f0, times, ANALYSIS_RATE, f0_floor=ENVELOPE_F0_FLOOR, fft_size=fft_size)
    aperiodicity = pyworld.d4c(wave, f0, times, ANALYSIS_RATE, fft_size=fft_size)
    return WorldFrames(f0, envelope, aperiodicity)


def voice_stats(frames: WorldFrames, source_sample_rate: int = ANALYSIS_RATE) -> VoiceStats:
    """Statistics of one analysed voice; ConversionError if it holds (almost) no voiced speech."""
    voiced = frames.f0 > 0
    if voiced.sum() < MIN_VOICED_FRAMES:
        raise ConversionError("no voiced speech was found in the recording")
    low, median, high = np.percentile(np.log(frames.f0[voiced]), [16, 50, 84])  # robust to octave errors
    bands = band_powers(frames.envelope)[speech_frames(frames.envelope)]
    bandwidth = 0.45 * min(source_sample_rate, ANALYSIS_RATE)
    return VoiceStats(
        log_f0_mean=float(median),
        log_f0_std=float(max((high - low) / 2, 0.03)),
        band_mean=bands.mean(axis=0),
        band_std=np.maximum(bands.std(axis=0), 0.1),
        valid_bands=int(max(1, (band_centres() <= bandwidth).sum())),
        voiced_seconds=float(voiced.sum() * FRAME_PERIOD_MS / 1000),
    )


class BaseVoiceModel:
    """Owns the statistics of one base voice (e.g. Piper's joe) at every warp in WARP_GRID.

    Built once per process from a few sentences of the base voice; converting toward a prompt maps
    this voice's statistics, at the chosen warp, onto the prompt's.
    """

    def __init__(self, warped_stats: dict[float, VoiceStats]):
        self.warped_stats = warped_stats
        self.stats = self.warped_stats[1.0]

    @classmethod
    def measure(cls, frames: WorldFrames, source_sample_rate: int = ANALYSIS_RATE) -> "BaseVoiceModel":
        frames = WorldFrames(
            *(values[::BASE_FRAME_STRIDE] for values in (frames.f0, frames.envelope, frames.aperiodicity))
        )
        return cls(
            {float(alpha): voice_stats(_warped(frames, float(alpha)), source_sample_rate) for alpha in WARP_GRID}
        )

    def to_rows(self) -> np.ndarray:
        """(len(WARP_GRID), STATS_VECTOR_SIZE) float64, one row per warp in WARP_GRID's order: all it holds."""
        return np.stack([self.warped_stats[float(alpha)].to_vector(np.float64) for alpha in WARP_GRID])

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> "BaseVoiceModel":
        """:meth:`to_rows`' inverse; ConversionError when ``rows`` is not one finite row per warp."""
        rows = np.asarray(rows)
        if rows.shape != (len(WARP_GRID), STATS_VECTOR_SIZE):
            raise ConversionError(f"base voice statistics must be {len(WARP_GRID)} rows, got shape {rows.shape}")
        return cls({float(alpha): VoiceStats.from_vector(row) for alpha, row in zip(WARP_GRID, rows)})

    def estimate_warp(self, target: VoiceStats) -> float:
        """The grid alpha whose warped long-term spectrum best matches the target's shape."""
        centres = band_centres()
        usable = (centres >= WARP_FIT_HZ[0]) & (centres <= WARP_FIT_HZ[1])
        usable[target.valid_bands :] = False
        goal = _shape(target.band_mean[usable], centres[usable])
        errors = {
            alpha: np.mean((_shape(stats.band_mean[usable], centres[usable]) - goal) ** 2)
            for alpha, stats in self.warped_stats.items()
        }
        return float(min(errors, key=errors.get))

    def convert(self, frames: WorldFrames, target: VoiceStats, alpha: float) -> np.ndarray:
        """Resynthesised (N,) float32 audio at ANALYSIS_RATE of ``frames`` moved toward ``target``."""
        import pyworld

        alpha = float(WARP_GRID[np.argmin(np.abs(WARP_GRID - alpha))])
        source = self.warped_stats[alpha]
        f0 = frames.f0.copy()
        voiced = f0 > 0
        z = (np.log(f0[voiced]) - source.log_f0_mean) / source.log_f0_std
        f0[voiced] = np.clip(np.exp(target.log_f0_mean + z * target.log_f0_std), F0_FLOOR, F0_CEIL)

        envelope = _warped(frames, alpha).envelope
        gains = _band_gains(band_powers(envelope), source, target)
        envelope = envelope * np.exp(gains @ _gain_interpolation(envelope.shape[1]).T)
        wave = pyworld.synthesize(f0, envelope, frames.aperiodicity, ANALYSIS_RATE, FRAME_PERIOD_MS)
        return np.nan_to_num(wave).astype(np.float32)


def _band_gains(bands: np.ndarray, source: VoiceStats, target: VoiceStats) -> np.ndarray:
    """(T, BAND_COUNT) log gains mapping each band's mean/deviation from ``source`` to ``target``.

    Deviations are stretched only within Z_CLIP standard deviations, so pauses and breaths are not
    blown up; bands outside the target's bandwidth repeat the gain of the highest valid band.
    """
    ratio = np.clip(target.band_std / source.band_std, *STD_RATIO_RANGE)
    deviation = np.clip(bands - source.band_mean, -Z_CLIP * source.band_std, Z_CLIP * source.band_std)
    gains = (target.band_mean - source.band_mean) + (ratio - 1.0) * deviation
    valid = min(source.valid_bands, target.valid_bands)
    gains[:, valid:] = gains[:, valid - 1 : valid]
    return np.clip(gains, -MAX_GAIN, MAX_GAIN)


def band_powers(envelope: np.ndarray) -> np.ndarray:
    """(T, BAND_COUNT) natural-log power in mel bands of a (T, F) power envelope."""
    return np.log(envelope @ _band_weights(envelope.shape[1]).T + 1e-12)


def speech_frames(envelope: np.ndarray) -> np.ndarray:
    """(T,) bool: frames loud enough to describe the voice (within SPEECH_RANGE of the loud end)."""
    level = np.log(envelope.sum(axis=1) + 1e-12)
    return level >= np.percentile(level, 99) - SPEECH_RANGE


_CACHE: dict = {}


def band_centres() -> np.ndarray:
    """(BAND_COUNT,) centre frequencies (Hz) of the mel bands."""
    if "centres" not in _CACHE:
        _CACHE["centres"] = mel_frequencies(BAND_COUNT + 2, BAND_FMIN, BAND_FMAX)[1:-1]
    return _CACHE["centres"]


def _band_weights(bins: int) -> np.ndarray:
    """(BAND_COUNT, bins) triangular mel filters, each row summing to 1 (a weighted mean of power)."""
    key = ("bands", bins)
    if key not in _CACHE:
        weights = mel_filters(ANALYSIS_RATE, 2 * (bins - 1), BAND_COUNT, BAND_FMIN, BAND_FMAX, area_norm=False)
        _CACHE[key] = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1e-12)
    return _CACHE[key]


def _gain_interpolation(bins: int) -> np.ndarray:
    """(bins, BAND_COUNT) matrix turning band gains into a per-bin gain, linear between band centres."""
    key = ("gains", bins)
    if key not in _CACHE:
        frequencies = np.linspace(0, ANALYSIS_RATE / 2, bins)
        identity = np.eye(BAND_COUNT)
        _CACHE[key] = np.stack([np.interp(frequencies, band_centres(), row) for row in identity], axis=1)
    return _CACHE[key]


def _warped(frames: WorldFrames, alpha: float) -> WorldFrames:
    """Formant warp: every frame's envelope becomes ``sp(f / alpha)`` (alpha > 1 raises the formants)."""
    if alpha == 1.0:
        return frames
    bins = frames.envelope.shape[1]
    position = np.clip(np.arange(bins) / alpha, 0, bins - 1)
    low = np.floor(position).astype(int)
    high = np.minimum(low + 1, bins - 1)
    weight = position - low
    log_envelope = np.log(frames.envelope + 1e-16)
    warped = np.exp(log_envelope[:, low] * (1 - weight) + log_envelope[:, high] * weight)
    return WorldFrames(frames.f0, warped, frames.aperiodicity)


def _shape(values: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """``values`` with their mean and linear tilt over log-frequency removed."""
    x = np.log(frequencies)
    slope, intercept = np.polyfit(x, values, 1)
    return values - (slope * x + intercept)


def _resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    wave = np.asarray(samples, dtype=np.float64).reshape(-1)  # pyworld works in double precision
    if source_rate != target_rate:
        divisor = gcd(int(source_rate), int(target_rate))
        wave = resample_poly(wave, target_rate // divisor, source_rate // divisor)
    return np.ascontiguousarray(wave)


def _fit_length(values: np.ndarray, length: int) -> np.ndarray:
    if len(values) >= length:
        return np.ascontiguousarray(values[:length])
    return np.concatenate([values, np.zeros(length - len(values))])
