"""Convolution building blocks of HiFT: one-sided padded convs, causal upsampling, Snake, ResBlock.

Module and parameter names follow the official ``hift.pt`` (after weight-norm folding), so a state
dict loads strictly: ``convs1.0.weight``, ``activations1.0.alpha``, ...
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

# (activation (B, C, L), its rate as a multiple of the mel's) -> the activation with each line's padding zeroed
Keep = Callable[[torch.Tensor, int], torch.Tensor]


def causal_padding(kernel_size: int, dilation: int = 1) -> int:
    """Zeros upstream's ``CausalConv1d`` adds on one side (k4 -> 3, k5 -> 4, k3/d5 -> 10, ...)."""
    return (kernel_size * dilation - dilation) // 2 * 2 + (kernel_size + 1) % 2


class PaddedConv1d(nn.Conv1d):
    """Conv1d with explicit zero padding ``(left, right)``: ``(B, C_in, T) -> (B, C_out, T')``.

    Symmetric padding covers the non-causal (CosyVoice2) convs, ``(P, 0)`` a causal conv and
    ``(0, P)`` a look-ahead conv. ``forward(x, pad_right=False)`` skips the right padding because the
    caller supplies real look-ahead frames instead (CosyVoice3 streaming), giving ``T - P`` outputs.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        padding: tuple[int, int] = (0, 0),
        stride: int = 1,
        dilation: int = 1,
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation)
        self.pad_left, self.pad_right = padding

    def forward(self, x: torch.Tensor, *, pad_right: bool = True) -> torch.Tensor:
        return self.forward_with(x, self.weight, self.bias, pad_right=pad_right)

    def forward_with(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, pad_right: bool = True
    ) -> torch.Tensor:
        """The same convolution with the given weights (e.g. in another precision)."""
        left, right = self.pad_left, self.pad_right if pad_right else 0
        if left == right:
            # Let the conv kernel pad: no copy of the activation.
            return F.conv1d(x, weight, bias, self.stride, left, self.dilation)
        return F.conv1d(F.pad(x, (left, right)), weight, bias, self.stride, 0, self.dilation)


class CausalUpsample(nn.Conv1d):
    """CosyVoice3 upsampler: nearest-neighbour x``stride``, left zero-pad ``k - 1``, then Conv1d(k).

    ``(B, C_in, T) -> (B, C_out, stride * T)``. Weights are ``[out, in, k]`` (a plain conv, not a
    transposed one). It runs as the equivalent transposed convolution: nearest upsampling followed by
    the conv equals ``conv_transpose1d`` with the kernel summed over each box of ``stride`` taps, which
    skips the ``stride``-fold redundant multiply-adds on repeated samples.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size)
        self.upsample_rate = stride
        self._kernel: torch.Tensor | None = None
        self._kernel_key: tuple | None = None
        # Loading a checkpoint copies into the weight in place: rebuild the kernel then, not per call.
        self.register_load_state_dict_post_hook(_refresh_after_load)

    def transposed_kernel(self) -> torch.Tensor:
        """``[in, out, k + stride - 1]``: ``sum_{j - stride < i <= j} w[i]`` at tap j (time-reversed)."""
        u = self.upsample_rate
        reversed_taps = self.weight.detach().flip(-1).transpose(0, 1)  # [in, out, k]
        padded = F.pad(reversed_taps, (u - 1, u - 1))
        return padded.unfold(-1, u, 1).sum(-1).contiguous()  # [in, out, k + u - 1]

    def refresh_kernel(self) -> torch.Tensor:
        """The precomputed kernel, rebuilt only when the weight changed (load, ``.to()``, in-place edit)."""
        weight = self.weight
        version = 0 if weight.is_inference() else weight._version  # inference tensors keep no version
        key = (weight.data_ptr(), version, weight.device, weight.dtype)
        # An inference-mode tensor cannot enter autograd: rebuild once if one is needed outside that mode.
        stale_mode = self._kernel is not None and self._kernel.is_inference() and not torch.is_inference_mode_enabled()
        if self._kernel is None or key != self._kernel_key or stale_mode:
            with torch.no_grad():
                self._kernel = self.transposed_kernel()
            self._kernel_key = key
        return self._kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.conv_transpose1d(x, self.refresh_kernel(), self.bias, stride=self.upsample_rate)
        # Output m of the transposed conv is causal output m; the last k - 1 are past the input's end.
        return out[..., : x.shape[-1] * self.upsample_rate]


def _refresh_after_load(module: CausalUpsample, _incompatible_keys) -> None:
    module.refresh_kernel()


class Snake(nn.Module):
    """Snake activation ``x + sin^2(alpha x) / (alpha + 1e-9)``, alpha per channel (linear scale)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        wave = torch.sin_(x * alpha)
        # Upstream's operations and rounding, but in place: one allocation instead of five.
        return wave.mul_(wave).mul_(1.0 / (alpha + 1e-9)).add_(x)


class ResBlock(nn.Module):
    """HiFi-GAN/BigVGAN residual block: per dilation d, ``x += conv_1(snake(conv_d(snake(x))))``.

    ``(B, C, T) -> (B, C, T)``. Non-causal blocks pad symmetrically, causal ones on the left.
    """

    def __init__(self, channels: int, kernel_size: int, dilations: list[int], *, causal: bool):
        super().__init__()

        def conv(dilation: int) -> PaddedConv1d:
            if causal:
                padding = (causal_padding(kernel_size, dilation), 0)
            else:
                half = dilation * (kernel_size - 1) // 2
                padding = (half, half)
            return PaddedConv1d(channels, channels, kernel_size, padding=padding, dilation=dilation)

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor, keep: Keep | None = None, factor: int = 1) -> torch.Tensor:
        """``keep(z, factor)``: zero a batch's padding after each convolution (see ``HiFT.decoder_features``)."""
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            if keep is None:
                x = conv2(act2(conv1(act1(x)))).add_(x)
            else:
                x = keep(conv2(act2(keep(conv1(act1(x)), factor))), factor).add_(x)
        return x
