"""HiFT building blocks in MLX, channels-last ``(B, T, C)`` (mirrors ``models.vocoder.layers`` / ``stft``).

One-sided padded convs, the two upsamplers (CosyVoice3's causal one as its equivalent transposed convolution,
CosyVoice2's transposed convolution), Snake,
the residual block, the f0 predictor and the real-arithmetic STFT pair with the PyTorch module's kernels.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from cosyvoice_mac.models.vocoder.f0 import NUM_LAYERS
from cosyvoice_mac.models.vocoder.layers import causal_padding
from cosyvoice_mac.models.vocoder.stft import _dft_kernels


def pad_time(x: mx.array, left: int, right: int) -> mx.array:
    return mx.pad(x, [(0, 0), (left, right), (0, 0)]) if left or right else x


def reflect_pad_time(x: mx.array, left: int, right: int) -> mx.array:
    """Reflect padding along time (no edge repeat), as ``F.pad(..., mode='reflect')``."""
    parts = [x[:, left:0:-1]] if left else []
    parts.append(x)
    if right:
        parts.append(x[:, -2 : -2 - right : -1])
    return mx.concatenate(parts, axis=1) if len(parts) > 1 else x


class PaddedConv1d(nn.Module):
    """Owns one Conv1d with explicit zero padding ``(left, right)``: ``(B, T, C_in) -> (B, T', C_out)``.

    ``pad_right=False`` skips the right padding (the caller passes real look-ahead frames instead).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        padding=(0, 0),
        stride: int = 1,
        dilation: int = 1,
    ):
        super().__init__()
        self.weight = mx.zeros((out_channels, kernel_size, in_channels))
        self.bias = mx.zeros((out_channels,))
        self.pad_left, self.pad_right = padding
        self.stride, self.dilation = stride, dilation

    def __call__(self, x: mx.array, *, pad_right: bool = True) -> mx.array:
        x = pad_time(x, self.pad_left, self.pad_right if pad_right else 0)
        weight = self.weight if self.weight.dtype == x.dtype else self.weight.astype(x.dtype)
        bias = self.bias if self.bias.dtype == x.dtype else self.bias.astype(x.dtype)
        return mx.conv1d(x, weight, stride=self.stride, dilation=self.dilation) + bias


class CausalUpsample(nn.Module):
    """CosyVoice3 upsampler (nearest x``stride``, left pad ``k - 1``, Conv1d k) run as one transposed conv.

    ``(B, T, C_in) -> (B, stride T, C_out)``. ``weight`` is the checkpoint's conv kernel; ``prepare()``
    builds the transposed kernel once after loading (the PyTorch module's ``transposed_kernel`` rule).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.weight = mx.zeros((out_channels, kernel_size, in_channels))
        self.bias = mx.zeros((out_channels,))
        self.stride = stride
        self._transposed: mx.array | None = None

    def prepare(self) -> mx.array:
        """Sum the kernel over each box of ``stride`` taps (time-reversed), MLX layout ``(C_out, K', C_in)``;
        returns it."""
        taps = self.weight.shape[1]
        reversed_taps = self.weight[:, ::-1]  # (out, k, in)
        padded = pad_time(reversed_taps, self.stride - 1, self.stride - 1)
        boxes = [padded[:, j : j + self.stride].sum(axis=1) for j in range(taps + self.stride - 1)]
        self._transposed = mx.stack(boxes, axis=1)
        return self._transposed

    def __call__(self, x: mx.array) -> mx.array:
        if self._transposed is None:
            self.prepare()
        out = mx.conv_transpose1d(x, self._transposed, stride=self.stride) + self.bias
        return out[:, : x.shape[1] * self.stride]


class TransposedUpsample(nn.Module):
    """CosyVoice2 upsampler: one ConvTranspose1d (stride ``rate``, ``padding`` trimmed from each end).

    ``(B, T, C) -> (B, rate T, C')``. ``weight`` arrives as the converted checkpoint's ``(C_in, k, C_out)``;
    :meth:`prepare` lays it out as MLX's ``(C_out, k, C_in)`` once after loading.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, rate: int):
        super().__init__()
        self.weight = mx.zeros((in_channels, kernel_size, out_channels))
        self.bias = mx.zeros((out_channels,))
        self.rate, self.padding = rate, (kernel_size - rate) // 2
        self._kernel: mx.array | None = None

    def prepare(self) -> mx.array:
        """Lay the weight out as MLX's transposed-conv kernel (after loading or changing it); returns it."""
        self._kernel = self.weight.transpose(2, 1, 0)
        return self._kernel

    def __call__(self, x: mx.array) -> mx.array:
        if self._kernel is None:
            self.prepare()
        out = mx.conv_transpose1d(x, self._kernel, stride=self.rate) + self.bias
        return out[:, self.padding : out.shape[1] - self.padding]


class Snake(nn.Module):
    """Snake ``x + sin^2(alpha x) / (alpha + 1e-9)``, alpha per channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = mx.ones((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        wave = mx.sin(x * self.alpha)
        return wave * wave * (1.0 / (self.alpha + 1e-9)) + x


class ResBlock(nn.Module):
    """Residual block: per dilation d, ``x += conv_1(snake(conv_d(snake(x))))``; causal or symmetric padding."""

    def __init__(self, channels: int, kernel_size: int, dilations: list[int], *, causal: bool):
        super().__init__()

        def conv(dilation: int) -> PaddedConv1d:
            half = dilation * (kernel_size - 1) // 2
            padding = (causal_padding(kernel_size, dilation), 0) if causal else (half, half)
            return PaddedConv1d(channels, channels, kernel_size, padding=padding, dilation=dilation)

        self.convs1 = [conv(d) for d in dilations]
        self.convs2 = [conv(1) for _ in dilations]
        self.activations1 = [Snake(channels) for _ in dilations]
        self.activations2 = [Snake(channels) for _ in dilations]

    def __call__(self, x: mx.array) -> mx.array:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class F0Predictor(nn.Module):
    """Owns the f0 network (``condnet`` convs, ELU, ``classifier``); keys as upstream's ``f0_predictor.*``.

    It runs in float32 on every MLX device (upstream uses float64 on the CPU; the Metal GPU has none). MLX's
    float64 convolutions on the CPU measured no closer to the reference than float32 (1e-4 Hz either way,
    inside the f0 tolerance), so one dtype keeps the Linux parity run the same computation as on a Mac.
    """

    def __init__(self, in_channels: int, cond_channels: int, *, causal: bool):
        super().__init__()
        self.causal = causal
        self.condnet = []
        for index in range(NUM_LAYERS):
            kernel = 4 if causal and index == 0 else 3
            if not causal:
                padding = (1, 1)
            elif index == 0:
                padding = (0, causal_padding(kernel))
            else:
                padding = (causal_padding(kernel), 0)
            self.condnet.append(
                PaddedConv1d(in_channels if index == 0 else cond_channels, cond_channels, kernel, padding=padding)
            )
        self.classifier = nn.Linear(cond_channels, 1)

    @property
    def lookahead(self) -> int:
        return self.condnet[0].pad_right if self.causal else 0

    def __call__(self, mel: mx.array, *, finalize: bool = True) -> mx.array:
        """mel ``(B, T, 80)`` -> f0 ``(B, T')`` Hz, float32 (``T' = T - lookahead`` if not finalising)."""
        x = mel.astype(mx.float32)
        real_lookahead = self.causal and not finalize
        for index, conv in enumerate(self.condnet):
            x = nn.elu(conv(x, pad_right=index > 0 or not real_lookahead))
        weight = self.classifier.weight.astype(x.dtype)
        return mx.abs((x @ weight.T + self.classifier.bias.astype(x.dtype))[..., 0])


class ConvSTFT:
    """Owns the fixed DFT kernels of the PyTorch ``ConvSTFT`` (Hann, center=True, reflect) in MLX layout."""

    def __init__(self, n_fft: int, hop_length: int):
        self.n_fft, self.hop_length = n_fft, hop_length
        analysis, synthesis, squared_window = _dft_kernels(n_fft)
        self.analysis = mx.array(analysis.numpy()).transpose(0, 2, 1)  # (2F, n_fft, 1)
        self.synthesis = mx.array(synthesis.numpy()).transpose(1, 2, 0)  # (1, n_fft, 2F)
        self.squared_window = mx.array(squared_window.numpy()).transpose(1, 2, 0)  # (1, n_fft, 1)

    def stft(self, signal: mx.array) -> mx.array:
        """``(B, L)`` -> ``(B, L // hop + 1, 2F)``: real parts of the F bins, then imaginary parts."""
        half = self.n_fft // 2
        padded = reflect_pad_time(signal[:, :, None], half, half)
        return mx.conv1d(padded, self.analysis, stride=self.hop_length)

    def istft(self, spectrum: mx.array) -> mx.array:
        """``(B, frames, 2F)`` -> ``(B, hop (frames - 1))``."""
        frames, half = spectrum.shape[1], self.n_fft // 2
        overlap_added = mx.conv_transpose1d(spectrum, self.synthesis, stride=self.hop_length)
        envelope = mx.conv_transpose1d(mx.ones((1, frames, 1)), self.squared_window, stride=self.hop_length)
        end = overlap_added.shape[1] - half
        return overlap_added[:, half:end, 0] / envelope[:, half:end, 0]
