"""The three spectral features CosyVoice takes from a prompt recording.

* ``whisper_log_mel``: 16 kHz -> (1, 128, T) input of the ONNX speech tokenizer (openai-whisper's
  ``log_mel_spectrogram(n_mels=128)``).
* ``kaldi_fbank``: 16 kHz -> (T, 80) input of the CAM++ speaker encoder (Kaldi ``compute-fbank-feats``
  defaults, as ``torchaudio.compliance.kaldi.fbank(num_mel_bins=80, dither=0)``).
* ``prompt_mel``: 24 kHz -> (1, T, 80) in-context prompt of the flow (Matcha-TTS ``mel_spectrogram``
  with the yaml's ``feat_extractor`` values, see :class:`PromptMelConfig`).

They run once per prompt, so they always run on the CPU (inputs on another device are copied
there) with ``torch.stft`` / ``torch.fft``; outputs are float32 CPU tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.versions import SAMPLE_RATE

# Whisper: 25 ms Hann frames every 10 ms at 16 kHz, 128 Slaney mel bins.
WHISPER_N_FFT = 400
WHISPER_HOP = 160
WHISPER_N_MELS = 128

# Kaldi fbank defaults: 25 ms frames, 10 ms shift, padded to the next power of two (512).
FBANK_FRAME_LENGTH = 400
FBANK_FRAME_SHIFT = 160
FBANK_FFT_SIZE = 512
FBANK_N_MELS = 80
FBANK_LOW_FREQ = 20.0
FBANK_PREEMPHASIS = 0.97
_FLOAT32_EPS = torch.finfo(torch.float32).eps


_MEL_STEP_HZ, _LOG_START_HZ, _LOG_STEP = 200.0 / 3, 1000.0, np.log(6.4) / 27.0  # Slaney's mel scale


def _hz_to_slaney_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above. cpu-only: numpy float64."""
    mels = hz / _MEL_STEP_HZ
    above = hz >= _LOG_START_HZ
    mels[above] = _LOG_START_HZ / _MEL_STEP_HZ + np.log(hz[above] / _LOG_START_HZ) / _LOG_STEP
    return mels


def _slaney_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = _MEL_STEP_HZ * mels
    above = mels >= _LOG_START_HZ / _MEL_STEP_HZ
    hz[above] = _LOG_START_HZ * np.exp(_LOG_STEP * (mels[above] - _LOG_START_HZ / _MEL_STEP_HZ))
    return hz


def slaney_mel_frequencies(count: int, fmin: float, fmax: float) -> np.ndarray:
    """``count`` frequencies (Hz) evenly spaced on Slaney's mel scale from ``fmin`` to ``fmax``, float64: what
    ``librosa.mel_frequencies`` gives (tests/test_worker_footprint.py)."""
    edges = np.array([fmin, fmax], dtype=np.float64)  # cpu-only: filter constants
    return _slaney_mel_to_hz(np.linspace(*_hz_to_slaney_mel(edges), count))


@lru_cache(maxsize=8)
@torch.inference_mode(False)  # cached: an inference tensor would break later autograd callers
def slaney_mel_filters(
    sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None, area_norm: bool = True
) -> torch.Tensor:
    """librosa's default (Slaney scale; area norm, or none) filterbank ``(n_mels, n_fft // 2 + 1)`` float32.

    The same operations as ``librosa.filters.mel`` (equal to the bit, tests/test_worker_footprint.py), written
    out because importing librosa's filters pulls numba and scipy into the model worker: 0.13 GB of
    resident memory, which the 8 GB mode cannot spare, and seconds of every worker's start.
    """
    mel_hz = slaney_mel_frequencies(n_mels + 2, fmin, sr / 2 if fmax is None else fmax)
    widths = np.diff(mel_hz)
    ramps = np.subtract.outer(mel_hz, np.fft.rfftfreq(n=n_fft, d=1.0 / sr))
    rising, falling = -ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]
    filters = np.maximum(0, np.minimum(rising, falling)).astype(np.float32)
    if area_norm:
        filters *= 2.0 / (mel_hz[2 : n_mels + 2] - mel_hz[:n_mels])[:, None]
    return torch.from_numpy(np.ascontiguousarray(filters))


def _mono_cpu(wave: torch.Tensor, what: str) -> torch.Tensor:
    """Check a ``(1, N)`` float waveform and return it as a float32 CPU tensor."""
    if not isinstance(wave, torch.Tensor) or wave.dim() != 2 or wave.shape[0] != 1:
        shape = tuple(wave.shape) if isinstance(wave, torch.Tensor) else type(wave).__name__
        raise ValueError(f"{what} needs a mono waveform of shape (1, N), got {shape}")
    if not wave.is_floating_point():
        raise TypeError(f"{what} needs float samples in [-1, 1], got {wave.dtype}")
    return wave.detach().cpu().float()


def whisper_log_mel(wave16k: torch.Tensor) -> torch.Tensor:
    """Whisper 128-bin log-mel of ``(1, N)`` 16 kHz audio -> ``(1, 128, N // 160)`` float32.

    Power STFT (centred, reflect padded) without its last frame, Slaney mel, ``log10`` floored at
    1e-10, then clamped to 8 below the utterance maximum and mapped by ``(x + 4) / 4``.
    """
    wave = _mono_cpu(wave16k, "whisper_log_mel")
    if wave.shape[1] <= WHISPER_N_FFT // 2:
        raise ValueError(
            f"whisper_log_mel needs more than {WHISPER_N_FFT // 2} samples (reflect padding), got {wave.shape[1]}"
        )
    window = torch.hann_window(WHISPER_N_FFT)
    spectrum = torch.stft(wave, WHISPER_N_FFT, WHISPER_HOP, window=window, return_complex=True)
    power = spectrum[..., :-1].abs() ** 2
    mel = slaney_mel_filters(16000, WHISPER_N_FFT, WHISPER_N_MELS, 0.0, None) @ power
    log_mel = torch.clamp(mel, min=1e-10).log10()
    log_mel = torch.maximum(log_mel, log_mel.max() - 8.0)
    return (log_mel + 4.0) / 4.0


@lru_cache(maxsize=2)
@torch.inference_mode(False)  # cached: an inference tensor would break later autograd callers
def _kaldi_mel_banks(n_mels: int) -> torch.Tensor:
    """Kaldi triangular mel filters on the HTK mel scale ``(n_mels, FFT_SIZE // 2 + 1)`` float32.

    Built in float32 like torchaudio's ``get_mel_banks``; the Nyquist column is zero.
    """

    def mel_scale(freq):
        return 1127.0 * torch.log(1.0 + freq / 700.0)

    nyquist = 8000.0
    mel_low = 1127.0 * math.log(1.0 + FBANK_LOW_FREQ / 700.0)
    mel_high = 1127.0 * math.log(1.0 + nyquist / 700.0)
    mel_delta = (mel_high - mel_low) / (n_mels + 1)
    bins = torch.arange(n_mels).unsqueeze(1)
    left = mel_low + bins * mel_delta
    center = mel_low + (bins + 1.0) * mel_delta
    right = mel_low + (bins + 2.0) * mel_delta
    fft_bin_width = 16000.0 / FBANK_FFT_SIZE
    mel = mel_scale(fft_bin_width * torch.arange(FBANK_FFT_SIZE // 2)).unsqueeze(0)
    up_slope = (mel - left) / (center - left)
    down_slope = (right - mel) / (right - center)
    banks = torch.clamp(torch.minimum(up_slope, down_slope), min=0.0)
    return F.pad(banks, (0, 1))


def kaldi_fbank(wave16k: torch.Tensor) -> torch.Tensor:
    """Kaldi log mel filterbank of ``(1, N)`` 16 kHz audio in [-1, 1] -> ``(T, 80)`` float32.

    ``T = 1 + (N - 400) // 160`` (``snip_edges``). Per frame: remove the DC offset, pre-emphasis
    0.97 (first sample repeated), Povey window (Hann ** 0.85), zero-pad to 512, power spectrum,
    80 triangular mel bins from 20 Hz to Nyquist, natural log floored at float32 eps. No dither,
    no energy term. Raises ValueError for audio shorter than one 25 ms frame.
    """
    wave = _mono_cpu(wave16k, "kaldi_fbank")[0]
    if wave.shape[0] < FBANK_FRAME_LENGTH:
        raise ValueError(
            f"kaldi_fbank needs at least {FBANK_FRAME_LENGTH} samples (one 25 ms frame), got {wave.shape[0]}"
        )
    frames = wave.unfold(0, FBANK_FRAME_LENGTH, FBANK_FRAME_SHIFT)  # (T, 400)
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = frames - FBANK_PREEMPHASIS * previous
    povey = torch.hann_window(FBANK_FRAME_LENGTH, periodic=False).pow(0.85)
    frames = F.pad(frames * povey, (0, FBANK_FFT_SIZE - FBANK_FRAME_LENGTH))
    power = torch.fft.rfft(frames).abs().pow(2.0)  # (T, 257)
    energies = power @ _kaldi_mel_banks(FBANK_N_MELS).T
    return torch.clamp(energies, min=_FLOAT32_EPS).log()


@dataclass(frozen=True)
class PromptMelConfig:
    """The flow's prompt-mel extractor: the yaml ``feat_extractor`` node (Matcha ``mel_spectrogram``).

    Defaults are the official values of both versions except ``fmax``: 8000 in cosyvoice2.yaml,
    ``null`` (Nyquist, 12 kHz) in cosyvoice3.yaml.
    """

    n_fft: int = 1920
    num_mels: int = 80
    sampling_rate: int = SAMPLE_RATE
    hop_size: int = 480
    win_size: int = 1920
    fmin: float = 0.0
    fmax: float | None = None
    center: bool = False

    @classmethod
    def from_yaml(cls, node: dict) -> "PromptMelConfig":
        """Build from the ``feat_extractor`` node of ``read_yaml_config``; unknown keys are ignored."""
        if not isinstance(node, dict):
            raise ConfigError(f"feat_extractor must be a mapping, got {type(node).__name__}")
        known = {field.name for field in fields(cls)}
        config = cls(**{key: value for key, value in node.items() if key in known})
        if config.center:
            raise ConfigError("feat_extractor.center: true is not supported (both official models use false)")
        if config.win_size != config.n_fft:
            raise ConfigError(f"feat_extractor.win_size ({config.win_size}) must equal n_fft ({config.n_fft})")
        return config


def mel_spectrogram(wave: torch.Tensor, config: PromptMelConfig) -> torch.Tensor:
    """Matcha log-magnitude mel of ``(1, N)`` audio -> ``(1, num_mels, N // hop)`` float32.

    Reflect-pad ``(n_fft - hop) / 2`` each side, uncentred STFT with a periodic Hann window,
    magnitude ``sqrt(re^2 + im^2 + 1e-9)``, Slaney mel, ``log(clamp(x, 1e-5))``.
    """
    wave = _mono_cpu(wave, "prompt_mel")
    pad = (config.n_fft - config.hop_size) // 2
    if wave.shape[1] <= pad:
        raise ValueError(f"prompt_mel needs more than {pad} samples (reflect padding), got {wave.shape[1]}")
    padded = F.pad(wave.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spectrum = torch.stft(
        padded,
        config.n_fft,
        hop_length=config.hop_size,
        win_length=config.win_size,
        window=torch.hann_window(config.win_size),
        center=False,
        return_complex=True,
    )
    magnitude = torch.sqrt(spectrum.real.pow(2) + spectrum.imag.pow(2) + 1e-9)
    filters = slaney_mel_filters(
        config.sampling_rate,
        config.n_fft,
        config.num_mels,
        float(config.fmin),
        None if config.fmax is None else float(config.fmax),
    )
    return torch.log(torch.clamp(filters @ magnitude, min=1e-5))


def prompt_mel(wave24k: torch.Tensor, fmax: float | None) -> torch.Tensor:
    """Flow prompt features of ``(1, N)`` 24 kHz audio -> ``(1, N // 480, 80)`` float32.

    ``fmax`` is the yaml value: 8000 for CosyVoice2, None (Nyquist) for CosyVoice3.
    """
    return mel_spectrogram(wave24k, PromptMelConfig(fmax=fmax)).transpose(1, 2)
