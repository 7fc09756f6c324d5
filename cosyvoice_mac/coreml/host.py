"""Host-side numpy pieces of the split vocoder: the harmonic source, polyphase I/O and chunk planning.

The source runs here, not in a graph: its phase integrates f0 over the whole utterance (up to ~1e6
rad), which float32 cannot hold (the reference's own float32 phase is only 54 dB clean at 10 s), and
its noise must stay seedable and replayable. The phase is kept in float64 cycles, wrapped per
frame: after 300 s it is still within 3e-9 cycles of exact. Everything here is numpy on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from cosyvoice_mac.models.vocoder import HiFT, SourceNoise
from cosyvoice_mac.models.vocoder.stft import hann_window

from .rewrite import POLYPHASE


@dataclass(frozen=True)
class HostSource:
    """Harmonic-plus-noise source of HiFT in numpy: f0 ``(T,)`` -> source ``(samples_per_frame T,)``.

    Owns the constants of upstream ``SourceModuleHnNSF`` and its ``l_linear`` (9 -> 1) weights.
    CosyVoice2 interpolates the phase linearly between frames (torch ``align_corners=False``),
    CosyVoice3 holds it per frame (``nearest_phase``).
    """

    sampling_rate: int
    samples_per_frame: int
    sine_amp: float
    noise_std: float
    voiced_threshold: float
    nearest_phase: bool
    weight: tuple[float, ...]  # l_linear.weight[0], one per harmonic
    bias: float

    @property
    def harmonics(self) -> int:
        return len(self.weight)

    @classmethod
    def from_hift(cls, hift: HiFT) -> HostSource:
        source = hift.m_source
        linear = source.l_linear
        return cls(
            sampling_rate=source.sampling_rate,
            samples_per_frame=source.samples_per_frame,
            sine_amp=float(source.sine_amp),
            noise_std=float(source.noise_std),
            voiced_threshold=float(source.voiced_threshold),
            nearest_phase=bool(source.nearest_phase),
            weight=tuple(float(v) for v in linear.weight.detach().cpu().reshape(-1)),
            bias=float(linear.bias.detach().cpu().reshape(-1)[0]),
        )

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, values: dict) -> HostSource:
        values = dict(values)
        values["weight"] = tuple(values["weight"])
        return cls(**values)

    def cycles(self, f0: np.ndarray, start_cycles: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Phase in cycles (mod 1) per frame as upstream's frame-rate cumsum, and cycles per sample.

        Both ``(T, H)`` float64. ``start_cycles (H,)`` continues the phase of a previous call
        (streaming); zeros by default.
        """
        f0 = np.asarray(f0, dtype=np.float32).astype(np.float64)  # upstream's f0 is float32
        overtones = np.arange(1, self.harmonics + 1, dtype=np.float64)
        per_sample = np.mod(f0[:, None] * overtones / self.sampling_rate, 1.0)  # (T, H)
        per_frame = np.mod(per_sample * self.samples_per_frame, 1.0)
        total = np.cumsum(per_frame, axis=0)
        if start_cycles is not None:
            total += start_cycles
        return np.mod(total, 1.0), per_sample

    def __call__(
        self,
        f0: np.ndarray,
        noise: SourceNoise,
        *,
        cache_source: np.ndarray | None = None,
        start_cycles: np.ndarray | None = None,
    ) -> np.ndarray:
        """f0 ``(T,)`` Hz -> source ``(samples_per_frame T,)`` float32.

        ``noise.take(L)`` supplies ``(1, H, L)`` unit noise; ``cache_source (n,)`` (CosyVoice2
        streaming) replaces the first ``n`` samples, as ``HiFT.inference(cache_source=...)`` does.
        """
        f0 = np.asarray(f0).reshape(-1)
        frames, step = f0.shape[0], self.samples_per_frame
        if noise.harmonics != self.harmonics:
            raise ValueError(f"source noise has {noise.harmonics} harmonics, the vocoder uses {self.harmonics}")
        cycles, per_sample = self.cycles(f0, start_cycles)  # (T, H)
        if self.nearest_phase:
            phase = np.repeat(cycles, step, axis=0)
        else:
            phase = self._interpolated(cycles, per_sample)
        excitation = np.sin(2.0 * np.pi * phase) * self.sine_amp  # (L, H)
        voiced = np.repeat(f0 > self.voiced_threshold, step)[:, None]
        unit_noise = noise.take(frames * step)
        unit_noise = unit_noise.detach().cpu().numpy()[0].T.astype(np.float64)  # (L, H)
        noise_amp = np.where(voiced, self.noise_std, self.sine_amp / 3)
        excitation = excitation * voiced + unit_noise * noise_amp
        merged = excitation @ np.asarray(self.weight, dtype=np.float64) + self.bias
        source = np.tanh(merged).astype(np.float32)
        if cache_source is not None and cache_source.size:
            cache = np.asarray(cache_source, dtype=np.float32).reshape(-1)
            if cache.size > source.size:
                raise ValueError(f"cache_source has {cache.size} samples, more than the {source.size} of this call")
            source[: cache.size] = cache
        return source

    def _interpolated(self, cycles: np.ndarray, per_sample: np.ndarray) -> np.ndarray:
        """CosyVoice2: torch ``interpolate(linear, align_corners=False)`` of the unwrapped phase, mod 1."""
        frames, step = cycles.shape[0], self.samples_per_frame
        position = (np.arange(frames * step) + 0.5) / step - 0.5
        position = np.maximum(position, 0.0)
        left = np.minimum(np.floor(position).astype(np.int64), frames - 1)
        right = np.minimum(left + 1, frames - 1)
        fraction = (position - left)[:, None]
        # unwrapped[right] - unwrapped[left] = the cycles added at frame `right` (0 when right == left)
        increment = np.where((right > left)[:, None], per_sample[right] * step, 0.0)
        return np.mod(cycles[left] + fraction * increment, 1.0)


def pad_polyphase(source: np.ndarray, n_fft: int = 16) -> np.ndarray:
    """Source ``(480 T,)`` -> reflect-padded polyphase ``(1, 4, 120 T + 4)`` float32 (row p: samples 4 m + p)."""
    half = n_fft // 2
    padded = np.pad(np.asarray(source, dtype=np.float32), half, mode="reflect")
    return np.ascontiguousarray(padded.reshape(-1, POLYPHASE).T[None])


def interleave(polyphase: np.ndarray) -> np.ndarray:
    """``(1, 4, M)`` -> ``(4 M,)``: inverse of the polyphase layout."""
    return np.ascontiguousarray(np.asarray(polyphase)[0].T).reshape(-1)


@lru_cache(maxsize=8)
def istft_envelope(samples: int, n_fft: int = 16, hop: int = POLYPHASE) -> np.ndarray:
    """Overlap-added squared Hann window for ``samples`` output samples (padding already trimmed)."""
    frames = samples // hop + 1
    window = hann_window(n_fft).astype(np.float32).astype(np.float64)  # as ConvSTFT
    squared = window**2
    taps = n_fft // hop
    envelope = np.zeros((frames + taps - 1, hop))  # row m, column p: sample hop m + p
    for tap in range(taps):
        envelope[tap : tap + frames] += squared[tap * hop : tap * hop + hop]
    envelope = envelope.reshape(-1)
    half = n_fft // 2
    return envelope[half : half + samples].astype(np.float32)


def finish_waveform(overlap_added: np.ndarray, audio_limit: float, n_fft: int = 16) -> np.ndarray:
    """Padded overlap-added signal ``(480 T + n_fft,)`` -> waveform ``(480 T,)``: normalise, trim, clamp."""
    half = n_fft // 2
    body = np.asarray(overlap_added, dtype=np.float32)[half:-half]
    wave = body / istft_envelope(body.shape[0], n_fft)
    return np.clip(wave, -audio_limit, audio_limit)


@dataclass(frozen=True)
class Chunk:
    """One decoder call: mel frames ``[start, start + size)``, of which ``[keep_from, keep_to)`` are kept."""

    start: int
    size: int
    keep_from: int
    keep_to: int


def plan_chunks(frames: int, size: int, left: int, right: int) -> list[Chunk]:
    """Cover ``frames`` mel frames with windows of ``size`` frames that keep ``left``/``right`` context.

    Windows touching the utterance's start or end keep their edge (the graph's own zero padding is
    then the utterance boundary, as in a whole-utterance call). Needs ``frames >= size``.
    """
    if size - left - right < 1:
        raise ValueError(f"a chunk of {size} frames cannot keep {left} + {right} context frames")
    if frames < size:
        raise ValueError(f"{frames} frames are fewer than one {size}-frame chunk")
    chunks, kept = [], 0
    start = 0
    while kept < frames:
        if start + size >= frames:
            start = frames - size
            chunks.append(Chunk(start, size, kept, frames))
            break
        keep_to = start + size - right
        chunks.append(Chunk(start, size, kept, keep_to))
        kept = keep_to
        start = kept - left
    return chunks


def to_numpy_mel(mel) -> np.ndarray:
    """A mel ``(1, 80, T)`` tensor or array (any device/dtype) -> float32 numpy."""
    if isinstance(mel, torch.Tensor):
        mel = mel.detach().to("cpu", torch.float32).numpy()
    mel = np.asarray(mel, dtype=np.float32)
    if mel.ndim != 3 or mel.shape[0] != 1:
        raise ValueError(f"the vocoder takes one mel of shape (1, 80, T), got {tuple(mel.shape)}")
    return np.ascontiguousarray(mel)
