"""Band-limited resampling equal to torchaudio's default ``Resample`` (sinc with a Hann window).

Upstream loads every prompt through ``torchaudio.transforms.Resample(orig, target)``; the prompt
features (and so the speech tokens and the speaker vector) depend on its exact output, so this is
the same polyphase filter: the rates are reduced by their gcd to ``orig``/``new``; output phase
``j`` (of ``new``) is a windowed-sinc FIR applied at input stride ``orig``. The cutoff is
``rolloff * min(orig, new) / 2`` (as a fraction of each rate) and the filter reaches
``lowpass_filter_width`` zero crossings of that cutoff on each side.

Only the default method (``sinc_interp_hann``, width 6, rolloff 0.99) is implemented; the kernel
is built in float64 on the CPU (as ``transforms.Resample`` does) and applied in the wave's dtype.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

LOWPASS_FILTER_WIDTH = 6
ROLLOFF = 0.99


@lru_cache(maxsize=16)
@torch.inference_mode(False)  # cached: an inference tensor would break later autograd callers
def _sinc_hann_kernel(orig: int, new: int) -> tuple[torch.Tensor, int]:
    """Polyphase filter bank ``(new, 1, 2 * width + orig)`` float32 and its one-sided ``width``.

    ``orig``/``new`` are the rates divided by their gcd.
    """
    base_freq = min(orig, new) * ROLLOFF
    width = math.ceil(LOWPASS_FILTER_WIDTH * orig / base_freq)
    taps = torch.arange(-width, width + orig, dtype=torch.float64) / orig  # cpu-only: filter design
    # Phase offsets are computed in float32 (an integer tensor divided by an int) before the
    # float64 sum, exactly as torchaudio does; it shifts the kernel by < 1e-7 of a sample.
    phases = torch.arange(0, -new, -1)[:, None] / new
    t = (phases.to(torch.float64) + taps[None, :]) * base_freq  # cpu-only: filter design
    t = t.clamp(-LOWPASS_FILTER_WIDTH, LOWPASS_FILTER_WIDTH)
    window = torch.cos(t * math.pi / LOWPASS_FILTER_WIDTH / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    kernel = sinc * window * (base_freq / orig)
    return kernel.to(torch.float32)[:, None, :], width


def resample(wave: torch.Tensor, orig_sr: int, target_sr: int) -> torch.Tensor:
    """Resample ``(..., N)`` float audio from ``orig_sr`` to ``target_sr`` Hz.

    Returns ``(..., ceil(N * target_sr / orig_sr))`` in the dtype and on the device of ``wave``.
    Equal (to float32 rounding) to ``torchaudio.functional.resample(wave, orig_sr, target_sr)``
    with its defaults.
    """
    if not wave.is_floating_point():
        raise TypeError(f"resample needs a floating-point waveform, got {wave.dtype}")
    if int(orig_sr) != orig_sr or int(target_sr) != target_sr or orig_sr <= 0 or target_sr <= 0:
        raise ValueError(f"sample rates must be positive integers, got {orig_sr} -> {target_sr}")
    orig_sr, target_sr = int(orig_sr), int(target_sr)
    if orig_sr == target_sr:
        return wave
    gcd = math.gcd(orig_sr, target_sr)
    orig, new = orig_sr // gcd, target_sr // gcd
    kernel, width = _sinc_hann_kernel(orig, new)
    kernel = kernel.to(device=wave.device, dtype=wave.dtype)

    leading_shape, length = wave.shape[:-1], wave.shape[-1]
    flat = wave.reshape(-1, 1, length)
    padded = F.pad(flat, (width, width + orig))
    phases = F.conv1d(padded, kernel, stride=orig)  # (B, new, frames): output j of each frame
    interleaved = phases.transpose(1, 2).reshape(flat.shape[0], -1)
    target_length = math.ceil(new * length / orig)
    return interleaved[:, :target_length].reshape(*leading_shape, -1)
