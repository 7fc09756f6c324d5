"""Convertible torch graphs of the HiFT vocoder: the f0 network and the decoder, without the source.

Core ML cannot convert the random sine source (``rand``, a phase ``cumsum`` near 1e6 rad) or
``torch.istft``; the ANE also limits tensor widths. So the vocoder is split: the host computes the
source (:mod:`.host`) and two graphs run in Core ML (or in torch, from the same modules):

* :class:`F0Graph`: mel ``(1, 80, T)`` -> f0 ``(1, T)``, always float32 (the source phase
  integrates f0, so fp16 f0 costs ~40 dB of waveform accuracy);
* :class:`DecoderGraph`: mel ``(1, 80, T)`` + source in **polyphase layout** ``(1, 4, 120 T + 4)``
  -> overlap-added iSTFT output, same layout. Polyphase row ``p`` holds samples ``4 m + p`` of the
  reflect-padded source (resp. of the overlap-added signal), so the STFT is a ``conv1d(4 -> 18, k4)``
  and the iSTFT a ``conv1d(18 -> 4, k4, pad 3)``: exact algebra, no tensor wider than ``120 T + 4``.
  The host divides by the window envelope, trims and clamps (:func:`.host.finish_waveform`).

The graphs copy the weights of a loaded :class:`~cosyvoice_mac.models.vocoder.HiFT` (weight norm is
already folded at load), fold each Snake's ``1 / (alpha + 1e-9)`` into a constant (bit-equal), run
CosyVoice3's nearest + causal-conv upsampling as one transposed conv with a summed kernel (fixed
length trims, no shape arithmetic), and clip before ``exp`` so that fp16 cannot overflow.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.models.vocoder import HiFT
from cosyvoice_mac.models.vocoder.layers import CausalUpsample, ResBlock

POLYPHASE = 4  # = the iSTFT hop: one polyphase row per sample phase
_FINAL_LEAKY_SLOPE = 0.01  # HiFT.decode: upstream's default leaky_relu slope before conv_post
_MAX_MAGNITUDE = 100.0
# exp(x) is clamped at 100 anyway; clip x first (fp16 exp overflows above 11.09). The upper bound is
# rounded up so that exp(bound) >= 100 and the clamp after it still yields exactly 100; the lower
# bound is where float32 exp is already 0 (an explicit bound keeps -inf/-FLT_MAX out of fp16 consts).
_LOG_MAX_MAGNITUDE = math.nextafter(math.log(_MAX_MAGNITUDE), math.inf)
_LOG_MIN_MAGNITUDE = -1.0e4


def polyphase_stft_kernel(analysis: torch.Tensor, hop: int = POLYPHASE) -> torch.Tensor:
    """``[2F, 1, n_fft]`` STFT kernel -> ``[2F, hop, n_fft / hop]``: tap ``q`` of row ``p`` is ``n = hop q + p``."""
    bins2, _, n_fft = analysis.shape
    return analysis.reshape(bins2, n_fft // hop, hop).transpose(1, 2).contiguous()


def polyphase_istft_kernel(synthesis: torch.Tensor, hop: int = POLYPHASE) -> torch.Tensor:
    """``[2F, 1, n_fft]`` synthesis kernel -> ``[hop, 2F, n_fft / hop]`` for ``conv1d(padding=taps - 1)``.

    Output row ``p`` at ``m`` sums ``spec[:, m - q] * synthesis[:, hop q + p]``; conv1d correlates, so
    the taps are reversed in ``q``.
    """
    bins2, _, n_fft = synthesis.shape
    taps = synthesis.reshape(bins2, n_fft // hop, hop).permute(2, 0, 1)  # [hop, 2F, taps]
    return taps.flip(-1).contiguous()


class FoldedSnake(nn.Module):
    """Snake ``x + sin(alpha x)^2 / (alpha + 1e-9)`` with the reciprocal precomputed (bit-equal)."""

    def __init__(self, alpha: torch.Tensor):
        super().__init__()
        alpha = alpha.detach().float()
        self.register_buffer("alpha", alpha[None, :, None].clone())
        self.register_buffer("inverse_alpha", (1.0 / (alpha + 1e-9))[None, :, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wave = torch.sin(x * self.alpha)
        return wave * wave * self.inverse_alpha + x


class FoldedResBlock(nn.Module):
    """Owns copies of one HiFT ResBlock's convs and folded Snakes: ``(1, C, T) -> (1, C, T)``."""

    def __init__(self, block: ResBlock):
        super().__init__()
        self.convs1 = copy.deepcopy(block.convs1)
        self.convs2 = copy.deepcopy(block.convs2)
        self.activations1 = nn.ModuleList(FoldedSnake(act.alpha) for act in block.activations1)
        self.activations2 = nn.ModuleList(FoldedSnake(act.alpha) for act in block.activations2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class TransposedCausalUpsample(nn.Module):
    """CosyVoice3 upsampler (nearest x rate, causal conv) as one transposed conv: ``(1, C, T) -> (1, C', rate T)``."""

    def __init__(self, upsample: CausalUpsample):
        super().__init__()
        self.rate = upsample.upsample_rate
        self.trim = upsample.kernel_size[0] - 1  # outputs past the input's end
        with torch.no_grad():
            self.register_buffer("kernel", upsample.transposed_kernel().detach().clone())
            self.register_buffer("bias", upsample.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv_transpose1d(x, self.kernel, self.bias, stride=self.rate)[..., : -self.trim]


def _fp32_copy(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module).float().cpu().eval().requires_grad_(False)


class F0Graph(nn.Module):
    """Owns a float32 copy of HiFT's f0 network: mel ``(1, 80, T)`` -> f0 in Hz ``(1, T)`` (finalize=True)."""

    def __init__(self, hift: HiFT):
        super().__init__()
        self.condnet = _fp32_copy(hift.f0_predictor.condnet)
        self.classifier = _fp32_copy(hift.f0_predictor.classifier)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.condnet(mel)
        return self.classifier(x.transpose(1, 2)).squeeze(-1).abs()


class DecoderGraph(nn.Module):
    """Owns float32 copies of HiFT's mel decoder (everything but f0 and the source).

    ``forward(mel (1, 80, T), source_polyphase (1, 4, 120 T + 4)) -> (1, 4, 120 T + 4)``: the
    overlap-added, not yet envelope-normalised iSTFT output in polyphase layout (finalize=True).
    """

    def __init__(self, hift: HiFT):
        super().__init__()
        config = hift.config
        if config.hop_len != POLYPHASE or config.n_fft % POLYPHASE:
            raise ValueError(
                f"the Core ML decoder needs iSTFT hop {POLYPHASE} and n_fft a multiple of it, "
                f"got hop {config.hop_len}, n_fft {config.n_fft}"
            )
        self.config = config
        self.conv_pre = _fp32_copy(hift.conv_pre)
        self.ups = nn.ModuleList(
            TransposedCausalUpsample(up) if isinstance(up, CausalUpsample) else _fp32_copy(up) for up in hift.ups
        )
        self.source_downs = _fp32_copy(hift.source_downs)
        self.source_resblocks = nn.ModuleList(FoldedResBlock(block) for block in hift.source_resblocks)
        self.resblocks = nn.ModuleList(FoldedResBlock(block) for block in hift.resblocks)
        self.conv_post = _fp32_copy(hift.conv_post)
        stft = hift.stft
        self.register_buffer("stft_kernel", polyphase_stft_kernel(stft.analysis_kernel.float().cpu()))
        self.register_buffer("istft_kernel", polyphase_istft_kernel(stft.synthesis_kernel.float().cpu()))
        self.eval().requires_grad_(False)

    def forward(self, mel: torch.Tensor, source_polyphase: torch.Tensor) -> torch.Tensor:
        config = self.config
        spectrum = F.conv1d(source_polyphase, self.stft_kernel)
        x = self.conv_pre(mel)
        kernels = len(config.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, config.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # the STFT has one frame more
            x = x + self.source_resblocks[i](self.source_downs[i](spectrum))
            mixed = self.resblocks[i * kernels](x)
            for j in range(1, kernels):
                mixed = mixed + self.resblocks[i * kernels + j](x)
            x = mixed / kernels
        x = self.conv_post(F.leaky_relu(x, _FINAL_LEAKY_SLOPE))
        bins = config.n_fft // 2 + 1
        log_magnitude = torch.clamp(x[:, :bins], _LOG_MIN_MAGNITUDE, _LOG_MAX_MAGNITUDE)
        magnitude = torch.clamp(torch.exp(log_magnitude), 0.0, _MAX_MAGNITUDE)
        phase = torch.sin(x[:, bins:])  # upstream feeds sin(raw) as the phase angle
        spectrum_out = torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)
        taps = self.istft_kernel.shape[-1]
        return F.conv1d(spectrum_out, self.istft_kernel, padding=taps - 1)


def build_graphs(hift: HiFT) -> tuple[F0Graph, DecoderGraph]:
    """Fresh float32 CPU graphs from a loaded vocoder (the vocoder itself is not modified)."""
    return F0Graph(hift).eval(), DecoderGraph(hift).eval()
