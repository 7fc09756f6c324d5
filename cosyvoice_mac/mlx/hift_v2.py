"""CosyVoice2's non-causal HiFT vocoder in MLX: mel -> 24 kHz wave (mirrors ``models.vocoder.hift``, v2).

mel -> f0 (same-padded convs, float32) -> harmonic source with a linearly interpolated phase and
Gaussian noise drawn per call -> STFT of the source fused at every stage of a transposed-conv
upsampler -> magnitude/phase -> iSTFT -> clamp. The frame-rate phase integral, its interpolation to
the sample rate and the noise are the PyTorch module's own CPU code, so both engines excite the filter
with identical numbers. Streaming (the cross-fade stitcher) passes the previous chunk's source tail
as ``cache_source``. Long mels decode in bounded windows (the PyTorch vocoder's window rule, shared with
CosyVoice3's MLX vocoder). Same :class:`HiFTConfig` and ``hift.pt``; ``inference`` takes and returns
PyTorch CPU tensors like :meth:`cosyvoice_mac.models.vocoder.HiFT.inference`.
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import torch
import torch.nn.functional as F

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.mlx.convert import load_converted, to_mlx, to_torch
from cosyvoice_mac.mlx.hift import KEY_MAP, MlxHiFT, MlxHiFTError, WindowedVocoder, synthesise
from cosyvoice_mac.mlx.hift_layers import ConvSTFT, F0Predictor, PaddedConv1d, ResBlock
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, HiFT, HiFTConfig, SourceNoise
from cosyvoice_mac.models.vocoder.source import HarmonicSource


class InterpolatedSource(nn.Module):
    """Owns ``l_linear``: f0 ``(1, T)`` -> source ``(1, T * samples_per_frame)`` (linearly interpolated phase)."""

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.l_linear = nn.Linear(config.nb_harmonics + 1, 1)
        self._rules = HarmonicSource(  # the PyTorch module: its CPU float32 phase is the rule
            sampling_rate=config.sampling_rate,
            samples_per_frame=config.samples_per_frame,
            harmonics=config.nb_harmonics + 1,
            sine_amp=config.nsf_alpha,
            noise_std=config.nsf_sigma,
            voiced_threshold=config.nsf_voiced_threshold,
            nearest_phase=False,
        )

    def __call__(self, f0: mx.array, noise: SourceNoise, first_frame: int = 0) -> mx.array:
        """From ``first_frame`` on only: ``(1, (T - first_frame) * samples_per_frame)``, equal to those samples
        of a whole call (the phase is integrated and interpolated, and the noise drawn, over all T frames)."""
        rules = self._rules
        if noise.harmonics != rules.harmonics:
            raise ValueError(f"source noise has {noise.harmonics} harmonics, the vocoder uses {rules.harmonics}")
        total, step = f0.shape[-1], rules.samples_per_frame
        frames = total - first_frame
        f0_cpu = to_torch(f0.astype(mx.float32))
        # Linear interpolation reads neighbouring frames: interpolate all, then keep the tail (1, H, L').
        phase = F.interpolate(rules.frame_phase(f0_cpu), scale_factor=float(step), mode="linear")
        phase = phase[:, :, first_frame * step :]
        sines = mx.sin(to_mlx(phase).transpose(0, 2, 1)).reshape(1, frames, step, -1) * rules.sine_amp
        voiced = (to_mlx(f0_cpu[:, first_frame:]) > rules.voiced_threshold)[:, :, None, None]  # (1, T', 1, 1)
        noise_amp = mx.where(voiced, rules.noise_std, rules.sine_amp / 3).astype(mx.float32)
        drawn = noise.take(total * step)[:, :, first_frame * step :]
        unit_noise = to_mlx(drawn).transpose(0, 2, 1).reshape(1, frames, step, -1)
        excitation = sines * voiced + unit_noise * noise_amp  # (1, T, step, H)
        return mx.tanh(self.l_linear(excitation.reshape(1, frames * step, -1))[..., 0])


class TransposedUpsample(nn.Module):
    """Owns one ConvTranspose1d (stride ``rate``, ``padding`` trimmed from each end): ``(B, T, C) -> (B, rate T, C')``.

    ``weight`` arrives as the converted checkpoint's ``(C_in, k, C_out)``; :meth:`prepare` lays it out as
    MLX's ``(C_out, k, C_in)`` once after loading.
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


class MlxHiFTV2(WindowedVocoder):
    """Owns CosyVoice2's vocoder in MLX: ``f0_predictor``, ``m_source``, the mel decoder and the STFT pair;
    decodes in the bounded windows of :class:`~cosyvoice_mac.mlx.hift.WindowedVocoder` (CosyVoice3's rule)."""

    streaming_lag = HiFT.streaming_lag
    decoder_lookahead = 0

    def __init__(self, config: HiFTConfig):
        super().__init__()
        if config.causal:
            raise MlxHiFTError("MlxHiFTV2 is CosyVoice2's HiFTGenerator; CosyVoice3's causal vocoder is MlxHiFT")
        self.config = config
        stages = len(config.upsample_rates)
        bins2 = config.n_fft + 2
        self.f0_predictor = F0Predictor(config.f0_in_channels, config.f0_cond_channels, causal=False)
        self.m_source = InterpolatedSource(config)
        self.conv_pre = PaddedConv1d(config.in_channels, config.base_channels, 7, padding=(3, 3))
        channels = [config.base_channels // 2**i for i in range(stages + 1)]
        self.ups = [
            TransposedUpsample(channels[i], channels[i + 1], kernel, rate)
            for i, (rate, kernel) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes))
        ]
        self.source_downs, self.source_resblocks = [], []
        downsample_rates = [math.prod(config.upsample_rates[i + 1 :]) for i in range(stages)]
        for i, (rate, kernel, dilations) in enumerate(
            zip(downsample_rates, config.source_resblock_kernel_sizes, config.source_resblock_dilation_sizes)
        ):
            if rate == 1:
                down = PaddedConv1d(bins2, channels[i + 1], 1)
            else:
                down = PaddedConv1d(bins2, channels[i + 1], 2 * rate, stride=rate, padding=(rate // 2, rate // 2))
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(channels[i + 1], kernel, list(dilations), causal=False))
        self.resblocks = [
            ResBlock(channels[i + 1], kernel, list(dilations), causal=False)
            for i in range(stages)
            for kernel, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes)
        ]
        self.conv_post = PaddedConv1d(channels[-1], bins2, 7, padding=(3, 3))
        self.stft = ConvSTFT(config.n_fft, config.hop_len)
        self.default_noise: SourceNoise = GaussianSourceNoise(harmonics=config.nb_harmonics + 1)

    @classmethod
    def from_checkpoint(cls, config: HiFTConfig, path: str | Path, *, cache_dir: Path | None = None) -> "MlxHiFTV2":
        model = cls(config)
        model.load_weights(list(load_converted(path, KEY_MAP, cache_dir=cache_dir).items()), strict=True)
        kernels = [up.prepare() for up in model.ups]
        mx.eval(model.parameters(), kernels)  # made here, used by the decode thread
        return model

    def inference(
        self,
        mel: torch.Tensor,
        *,
        finalize: bool = True,
        cache_source: torch.Tensor | None = None,
        noise: SourceNoise | None = None,
        first_frame: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel ``(1, 80, T)`` -> ``(wav (1, 480 T), source (1, 1, 480 T))`` float32 CPU tensors, as the PyTorch HiFT.

        ``cache_source (1, 1, n)`` (streaming) replaces the first n source samples; ``first_frame`` k returns
        the audio from sample ``480 k`` on, decoding only the frames it needs plus the non-causal layers'
        context on both sides (:meth:`decode_windows`, which also bounds each window by :attr:`conv_limit`).
        """
        HiFT._checked_mel(self, mel, finalize)
        frames = to_mlx(mel.float().cpu()).transpose(0, 2, 1)  # (1, T, 80)
        f0 = self.f0_predictor(frames)
        noise = noise if noise is not None else self.default_noise
        wav, source = self.decode_windows(frames, f0, noise, True, first_frame, cache_source)
        return to_torch(wav), to_torch(source[:, None, :])

    def f0(self, mel: torch.Tensor, *, finalize: bool = True) -> torch.Tensor:
        """mel ``(1, 80, T)`` -> f0 ``(1, T)`` Hz as a float32 torch tensor."""
        return to_torch(self.f0_predictor(to_mlx(mel.float().cpu()).transpose(0, 2, 1)))

    def decode(self, mel: mx.array, source: mx.array, *, finalize: bool = True) -> mx.array:
        """mel ``(1, T, 80)`` + source ``(1, 480 T)`` -> waveform ``(1, 480 T)`` (non-causal: every call is final)."""
        config = self.config
        spectrum = self.stft.stft(source)
        wav = synthesise(self, self.conv_pre(mel), spectrum)
        return mx.clip(wav, -config.audio_limit, config.audio_limit)


def mlx_hift_for(config: HiFTConfig):
    """The MLX vocoder class for ``config``: MlxHiFT (causal, v3) or MlxHiFTV2 (non-causal, v2)."""
    return MlxHiFT if config.causal else MlxHiFTV2


def load_mlx_vocoder(config_path: str | Path, checkpoint_path: str | Path, **kwargs) -> MlxHiFT | MlxHiFTV2:
    """Build the MLX vocoder of a model folder's version from its yaml and ``hift.pt``."""
    config = HiFTConfig.from_yaml(read_yaml_config(config_path).get("hift"))
    return mlx_hift_for(config).from_checkpoint(config, checkpoint_path, **kwargs)
