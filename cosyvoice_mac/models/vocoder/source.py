"""Harmonic-plus-noise excitation of HiFT (upstream ``SourceModuleHnNSF`` with ``SineGen2``).

f0 per mel frame -> 9 sinusoids (f0 and 8 overtones) whose phase is integrated at the frame rate,
plus noise -> ``tanh(Linear(9 -> 1))`` -> one source sample per output sample.

Noise is what differs between the versions: CosyVoice2 draws fresh Gaussian noise each call,
CosyVoice3 uses a *uniform* buffer drawn once when upstream builds the model. A :class:`SourceNoise`
supplies it, always drawn on the CPU so that seeds give the same values on every device, and hands it
to the vocoder's device (:meth:`SourceNoise.on_device`; the fixed buffer keeps a device copy).
Upstream's random initial phase never reaches the output (it is added to sample 0, which the
frame-rate downsampling never reads), so no initial phase is drawn or accepted here.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

from ...device import copy_to_device, has_float64

_FIXED_NOISE_BLOCK = 30 * 24000  # grow the cached buffer in 30 s steps (26 MB for 9 harmonics)


class SourceNoise(ABC):
    """Supplies the unit-scale noise of one call: ``take(L) -> (1, H, L)`` float32 on the CPU."""

    harmonics: int

    @abstractmethod
    def take(self, num_samples: int) -> torch.Tensor:
        """Noise for ``num_samples`` output samples, ``(1, harmonics, num_samples)``."""

    def on_device(self, num_samples: int, device: torch.device) -> torch.Tensor:
        """:meth:`take` on ``device`` (to CUDA without waiting for the stream)."""
        return copy_to_device(self.take(num_samples), device)


class GaussianSourceNoise(SourceNoise):
    """CosyVoice2: fresh ``N(0, 1)`` noise per call from a CPU generator (given, or seeded here)."""

    def __init__(self, generator: torch.Generator | None = None, *, seed: int = 1986, harmonics: int = 9):
        self.generator = generator if generator is not None else torch.Generator().manual_seed(seed)
        self.harmonics = harmonics

    def take(self, num_samples: int) -> torch.Tensor:
        return torch.randn(1, self.harmonics, num_samples, generator=self.generator)


class RecordedSourceNoise(SourceNoise):
    """Replays given noise in upstream's layout ``(1, N, H)`` (recorded draws or a fixed buffer prefix)."""

    def __init__(self, noise: torch.Tensor):
        if noise.dim() != 3 or noise.shape[0] != 1:
            raise ValueError(f"recorded source noise must have shape (1, N, harmonics), got {tuple(noise.shape)}")
        self.noise = noise.detach().cpu().float()
        self.harmonics = noise.shape[2]

    def take(self, num_samples: int) -> torch.Tensor:
        if num_samples > self.noise.shape[1]:
            raise ValueError(
                f"recorded source noise has {self.noise.shape[1]} samples, this call needs {num_samples}: "
                "record (or pass) noise at least as long as the audio"
            )
        return self.noise[:, :num_samples].transpose(1, 2)


class FixedUniformSourceNoise(SourceNoise):
    """CosyVoice3's construction-time ``torch.rand(1, 7_200_000, 9)`` buffer, built lazily.

    Upstream draws it from the global CPU generator while HyperPyYAML builds the official model; the
    manifest (``full_size.cosyvoice3_hift_fixed_noise``) gives the draws that come before it. Replaying
    their counts on a private generator reproduces the released model's buffer exactly (sha256 checked).
    ``torch.rand`` fills serially, so a shorter draw is a prefix of the full one: only the samples a
    call needs are generated (in 30 s blocks) and cached; a longer call regenerates from the saved
    state after dropping the old cache, so the buffer never exists twice. Upstream's buffer ends at
    300 s (7.2 M samples); past that the same random stream simply continues.
    """

    harmonics = 9

    def __init__(self):
        self._start_state: torch.Tensor | None = None
        self._cache: torch.Tensor | None = None  # (1, N, 9), a prefix of the upstream buffer
        self._device_copy: torch.Tensor | None = None  # (1, 9, N) on the vocoder's device (not the CPU)
        self._lock = threading.Lock()

    @property
    def device_copy(self) -> torch.Tensor | None:
        """The device copy :meth:`on_device` slices now (a CUDA graph that read it keeps it alive)."""
        return self._device_copy

    def on_device(self, num_samples: int, device: torch.device) -> torch.Tensor:
        """The buffer's first ``num_samples`` as a view of one device copy, made (one copy) when the device or
        length changes: the same memory every call, so a CUDA graph can read it and no call copies."""
        device = torch.device(device)
        if device.type == "cpu":
            return self.take(num_samples)
        with self._lock:
            held = self._device_copy
            if held is None or held.device != device or held.shape[-1] < num_samples:
                self._device_copy = None  # never two device copies at once
                length = math.ceil(num_samples / _FIXED_NOISE_BLOCK) * _FIXED_NOISE_BLOCK
                self._device_copy = self._take_locked(length).to(device).contiguous()
            return self._device_copy[:, :, :num_samples]

    def take(self, num_samples: int) -> torch.Tensor:
        with self._lock:
            return self._take_locked(num_samples)

    def _take_locked(self, num_samples: int) -> torch.Tensor:
        if self._cache is None or self._cache.shape[1] < num_samples:
            self._cache = None
            length = math.ceil(num_samples / _FIXED_NOISE_BLOCK) * _FIXED_NOISE_BLOCK
            generator = torch.Generator()
            generator.set_state(self._state_before_buffer())
            self._cache = torch.rand(1, length, self.harmonics, generator=generator)
        return self._cache[:, :num_samples].transpose(1, 2)

    def _state_before_buffer(self) -> torch.Tensor:
        if self._start_state is None:
            self._start_state = replay_cosyvoice3_draws_before_source_noise()
        return self._start_state


def replay_cosyvoice3_draws_before_source_noise() -> torch.Tensor:
    """CPU generator state right before upstream draws ``SineGen2.sine_waves`` (full-size CosyVoice3)."""
    generator = torch.Generator().manual_seed(0)  # CausalConditionalCFM.__init__: set_all_random_seed(0)
    torch.randn(1, 80, 15000, generator=generator)  # CFM rand_noise
    torch.empty(6561, 80).normal_(generator=generator)  # flow.input_embedding
    cond, mel, harmonics = 512, 80, 9
    uniform_counts = (
        [192 * 80, 80]  # flow.spk_embed_affine_layer weight, bias
        + [cond * mel * 4, cond]  # f0_predictor.condnet.0 (k4) weight, bias
        + [cond * cond * 3, cond] * 4  # condnet.2/4/6/8 (k3)
        + [cond, 1]  # f0_predictor.classifier
        + [harmonics]  # SineGen2.rand_ini
    )
    for count in uniform_counts:
        torch.empty(count).uniform_(generator=generator)  # one 32-bit draw per float32, any bounds
    return generator.get_state()


class HarmonicSource(nn.Module):
    """Owns ``l_linear`` (upstream ``m_source``): f0 ``(1, T)`` -> source ``(1, 1, T * samples_per_frame)``.

    The frame-rate phase integral (T x 9 values) must be the same on every device: the phase reaches
    ~1e5 rad, so one float32 ulp is visible in the source. Upstream's reference, torch's float32 cumsum
    on the CPU, adds in float64 and rounds each sum to float32; so does :meth:`frame_phase`, on f0's own
    device where it has float64 (CUDA: no sync with the host, and the call can be a CUDA graph), on the
    CPU otherwise (MPS). Its terms are float32 values in [0, 1): float64 adds them exactly while each is
    zero or at least 2**-14 and the sum stays below 2**16 (each term is below 1: 22 minutes of mel), so
    the order of the device's parallel scan cannot change a sum; a tinier term (f0 under ~1 Hz) can
    leave a float64 ulp, which moves the float32 result only at a rounding boundary (~1 in 2**29).
    The per-sample work runs on the module's device.
    """

    def __init__(
        self,
        *,
        sampling_rate: int,
        samples_per_frame: int,
        harmonics: int,
        sine_amp: float,
        noise_std: float,
        voiced_threshold: float,
        nearest_phase: bool,
    ):
        super().__init__()
        self.sampling_rate = sampling_rate
        self.samples_per_frame = samples_per_frame
        self.harmonics = harmonics
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        self.nearest_phase = nearest_phase  # CosyVoice3 holds the phase per frame; CosyVoice2 interpolates
        self.l_linear = nn.Linear(harmonics, 1)

    def frame_phase(self, f0: torch.Tensor) -> torch.Tensor:
        """f0 ``(1, T)`` -> phase at each frame's end times ``samples_per_frame``: ``(1, H, T)`` float32, on
        f0's device (the CPU when that device has no float64).

        Upstream computes the per-sample ``(f0 h / sr) mod 1``, downsamples it linearly to the frame
        rate (reading two equal samples mid-frame, so the value is exact) and takes the cumsum there.
        """
        f0 = f0.detach().float()
        if not has_float64(f0.device):
            f0 = f0.cpu()
        overtones = torch.arange(1, self.harmonics + 1, dtype=torch.float32, device=f0.device)
        # A divisor on the device: CUDA multiplies by the reciprocal of a host scalar, which rounds otherwise.
        rate = torch.full((1,), float(self.sampling_rate), dtype=torch.float32, device=f0.device)
        cycles_per_sample = (f0[:, :, None] * overtones / rate) % 1  # (1, T, H)
        # float64 sums rounded to float32: what the CPU's float32 cumsum computes (see the class). Never on MPS:
        # without float64 (has_float64 above) f0 came to the CPU; CUDA has float64.
        cycles = torch.cumsum(cycles_per_sample, dim=1, dtype=torch.float64).float()  # cpu-only: MPS work is on the CPU
        phase = cycles * 2 * math.pi
        return phase.transpose(1, 2) * self.samples_per_frame

    def forward(self, f0: torch.Tensor, noise: SourceNoise, first_frame: int = 0) -> torch.Tensor:
        """f0 ``(1, T)`` in Hz -> source ``(1, 1, (T - first_frame) * samples_per_frame)`` on the module's device.

        The phase is integrated from frame 0 and the noise drawn for the whole call either way, so the
        samples from ``first_frame`` on equal those of a whole call; only they are computed (CosyVoice3).
        """
        if noise.harmonics != self.harmonics:
            raise ValueError(f"source noise has {noise.harmonics} harmonics, the vocoder uses {self.harmonics}")
        device, step = self.l_linear.weight.device, self.samples_per_frame
        phase = self.frame_phase(f0).to(device)  # already there but on MPS
        unit_noise = noise.on_device(f0.shape[-1] * step, device)
        if self.nearest_phase:  # each frame's phase repeated (expanded: repeat_interleave may sync on CUDA)
            phase = phase[:, :, first_frame:, None].expand(-1, -1, -1, step).contiguous().flatten(2)
        else:  # linear interpolation reads neighbouring frames: interpolate all, then keep the tail
            phase = F.interpolate(phase, scale_factor=float(step), mode="linear")[:, :, first_frame * step :]
        f0, frames = f0[:, first_frame:], f0.shape[-1] - first_frame
        excitation = phase.sin_().mul_(self.sine_amp).unflatten(-1, (frames, step))  # (1, H, T, step)

        voiced = (f0.to(device, torch.float32) > self.voiced_threshold)[:, None, :, None]  # (1, 1, T, 1)
        noise_amp = torch.where(voiced, self.noise_std, self.sine_amp / 3).to(torch.float32)
        unit_noise = unit_noise[:, :, first_frame * step :].unflatten(-1, (frames, step))
        excitation.mul_(voiced).addcmul_(unit_noise, noise_amp)  # sines on voiced frames + noise
        # Upstream's layout (1, L, H) over the same memory; a GEMM, far faster than a 1x1 conv here.
        merged = self.l_linear(excitation.flatten(2).transpose(1, 2))
        return merged.transpose(1, 2).tanh_()
