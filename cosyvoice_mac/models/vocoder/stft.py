"""Short-time Fourier transform pair of the HiFT vocoder, in real arithmetic.

The vocoder needs ``torch.stft`` / ``torch.istft`` with a periodic Hann window, ``center=True`` and
reflect padding (n_fft 16, hop 4). Complex tensors and FFTs are unreliable on MPS and have no Core ML
converter, so both directions are convolutions with fixed kernels in which the window is folded
into the discrete Fourier basis:

* analysis: reflect-pad by n_fft/2, then ``conv1d`` with an ``[2F, 1, n_fft]`` kernel (F = n_fft/2 + 1
  bins; rows ``w[n] cos(2 pi k n / N)`` for the real parts, ``-w[n] sin(...)`` for the imaginary parts);
* synthesis: ``conv_transpose1d`` with the inverse-DFT basis times the window (overlap-add), divided by
  the overlap-added squared window, then n_fft/2 samples trimmed at each end, as ``torch.istft`` does.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def hann_window(n_fft: int) -> np.ndarray:
    """Periodic Hann window (``scipy.signal.get_window('hann', n_fft, fftbins=True)``), float64 numpy."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)


def _dft_kernels(n_fft: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Analysis kernel, synthesis kernel (both ``[2F, 1, n_fft]``) and squared window ``[1, 1, n_fft]``."""
    bins = n_fft // 2 + 1
    window = hann_window(n_fft).astype(np.float32).astype(np.float64)  # upstream keeps a float32 window
    angle = 2.0 * np.pi * np.outer(np.arange(bins), np.arange(n_fft)) / n_fft  # [F, n_fft]
    analysis = np.concatenate([np.cos(angle), -np.sin(angle)]) * window
    # irfft: bins other than DC and Nyquist stand for a conjugate pair; their imaginary parts at DC and
    # Nyquist are ignored (sin is exactly zero there; set it so rather than ~1e-16).
    weight = np.full((bins, 1), 2.0)
    weight[0] = weight[-1] = 1.0
    inverse_sin = np.sin(angle)
    inverse_sin[[0, -1]] = 0.0
    synthesis = np.concatenate([weight * np.cos(angle), -weight * inverse_sin]) * window / n_fft
    squared_window = (window**2)[None, None, :]

    def as_kernel(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).reshape(-1, 1, n_fft)

    return as_kernel(analysis), as_kernel(synthesis), as_kernel(squared_window)


class ConvSTFT(nn.Module):
    """Owns the fixed DFT kernels; ``stft``/``istft`` equal torch's (Hann, center=True, reflect).

    The kernels are non-persistent buffers: they follow ``.to(device)`` but are not in the state dict.
    """

    def __init__(self, n_fft: int = 16, hop_length: int = 4):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.bins = n_fft // 2 + 1
        analysis, synthesis, squared_window = _dft_kernels(n_fft)
        self.register_buffer("analysis_kernel", analysis, persistent=False)
        self.register_buffer("synthesis_kernel", synthesis, persistent=False)
        self.register_buffer("squared_window", squared_window, persistent=False)

    def stft(self, signal: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` -> ``(B, 2F, L // hop + 1)``: real parts of the F bins, then imaginary parts."""
        half = self.n_fft // 2
        padded = F.pad(signal.unsqueeze(1), (half, half), mode="reflect")
        return F.conv1d(padded, self.analysis_kernel, stride=self.hop_length)

    def istft(self, spectrum: torch.Tensor) -> torch.Tensor:
        """``(B, 2F, frames)`` (real parts, then imaginary parts) -> ``(B, hop * (frames - 1))``."""
        frames = spectrum.shape[-1]
        half = self.n_fft // 2
        overlap_added = F.conv_transpose1d(spectrum, self.synthesis_kernel, stride=self.hop_length)
        ones = spectrum.new_ones(1, 1, frames)
        envelope = F.conv_transpose1d(ones, self.squared_window, stride=self.hop_length)
        end = overlap_added.shape[-1] - half
        # Trim before dividing: the envelope is zero at the very first sample.
        return overlap_added[:, 0, half:end] / envelope[:, 0, half:end]
