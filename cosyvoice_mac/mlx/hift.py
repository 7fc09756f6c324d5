"""The causal HiFT vocoder of CosyVoice3 in MLX: mel -> 24 kHz wave (mirrors ``models.vocoder.hift``).

mel -> f0 (float32) -> harmonic source -> STFT of the source fused at
every upsampling stage -> magnitude/phase -> iSTFT -> clamp. The frame-rate phase integral and the
source noise are the PyTorch module's own CPU code (``HarmonicSource.frame_phase`` and the
:class:`SourceNoise` objects), so both engines excite the filter with identical numbers. Same
:class:`HiFTConfig` and ``hift.pt``; CosyVoice2's non-causal vocoder is :class:`cosyvoice_mac.mlx.hift_v2.MlxHiFTV2`.

``inference`` takes and returns PyTorch CPU tensors like :meth:`cosyvoice_mac.models.vocoder.HiFT.inference`.
Both versions' MLX vocoders share :class:`WindowedVocoder` (bounded windows, first-frame decoding) and
:func:`synthesise` (the decoder body).
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.mlx.convert import load_converted, to_mlx, to_torch
from cosyvoice_mac.mlx.hift_layers import (
    CausalUpsample,
    ConvSTFT,
    F0Predictor,
    PaddedConv1d,
    ResBlock,
    reflect_pad_time,
)
from cosyvoice_mac.models.vocoder import FixedUniformSourceNoise, HiFT, HiFTConfig, SourceNoise
from cosyvoice_mac.models.vocoder.hift import _FINAL_LEAKY_SLOPE, _MAX_MAGNITUDE
from cosyvoice_mac.models.vocoder.layers import causal_padding
from cosyvoice_mac.models.vocoder.source import HarmonicSource
from cosyvoice_mac.models.vocoder.window import plan_windows

MLX_CONV_WINDOW = 65536  # samples: ~10.9 s of audio per decoder window (the MPS limit, a bounded transient)
LOW_MEMORY_CONV_WINDOW = 32768  # ~5.4 s per window in the low-memory mode

KEY_MAP = ((r"^f0_predictor\.condnet\.(\d+)\.", lambda m: f"f0_predictor.condnet.{int(m.group(1)) // 2}."),)


class MlxHiFTError(ValueError):
    """A vocoder config given to the MLX vocoder class of the other version (``hift_v2.mlx_hift_for`` picks)."""


class Source(nn.Module):
    """Owns ``l_linear``: f0 ``(1, T)`` -> source ``(1, T * samples_per_frame)`` (nearest-held phase)."""

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.l_linear = nn.Linear(config.nb_harmonics + 1, 1)
        self._phase = HarmonicSource(  # the PyTorch module: its CPU float32 phase integral is the rule
            sampling_rate=config.sampling_rate,
            samples_per_frame=config.samples_per_frame,
            harmonics=config.nb_harmonics + 1,
            sine_amp=config.nsf_alpha,
            noise_std=config.nsf_sigma,
            voiced_threshold=config.nsf_voiced_threshold,
            nearest_phase=True,
        )

    def __call__(self, f0: mx.array, noise: SourceNoise, first_frame: int = 0) -> mx.array:
        """From ``first_frame`` on only: ``(1, (T - first_frame) * samples_per_frame)``, equal to those samples
        of a whole call (the phase integral and the noise still start at frame 0)."""
        rules = self._phase
        if noise.harmonics != rules.harmonics:
            raise ValueError(f"source noise has {noise.harmonics} harmonics, the vocoder uses {rules.harmonics}")
        total, step = f0.shape[-1], rules.samples_per_frame
        frames = total - first_frame
        f0_cpu = to_torch(f0.astype(mx.float32))
        phase = to_mlx(rules.frame_phase(f0_cpu)[:, :, first_frame:]).transpose(0, 2, 1)  # (1, T', H)
        excitation = mx.sin(phase)[:, :, None, :] * rules.sine_amp  # (1, T', 1, H): held for `step` samples
        voiced = (to_mlx(f0_cpu[:, first_frame:]) > rules.voiced_threshold)[:, :, None, None]  # (1, T', 1, 1)
        noise_amp = mx.where(voiced, rules.noise_std, rules.sine_amp / 3).astype(mx.float32)
        drawn = noise.take(total * step)[:, :, first_frame * step :]
        unit_noise = to_mlx(drawn).transpose(0, 2, 1).reshape(1, frames, step, -1)
        excitation = excitation * voiced + unit_noise * noise_amp  # (1, T, step, H)
        merged = self.l_linear(excitation.reshape(1, frames * step, -1))
        return mx.tanh(merged[..., 0])


class WindowedVocoder(nn.Module):
    """What both versions' MLX vocoders share around their ``decode``: bounded windows and first-frame decoding.

    A subclass owns ``config``, ``m_source(f0, noise, first_frame)``, ``decode(mel, source, finalize=)`` and
    ``decoder_lookahead``; this class owns :attr:`conv_limit` and the window plan (the PyTorch vocoder's).
    """

    def __init__(self):
        super().__init__()
        self.conv_limit: int | None = MLX_CONV_WINDOW  # the longest conv time axis of one window; None: one shot
        self._window_rules: HiFT | None = None

    @property
    def window_rules(self) -> HiFT:
        """The PyTorch HiFT of this config on the meta device: its modules give each window's context."""
        if self._window_rules is None:
            with torch.device("meta"):
                self._window_rules = HiFT(self.config)
        return self._window_rules

    def decode_windows(
        self,
        mel: mx.array,
        f0: mx.array,
        noise: SourceNoise,
        finalize: bool,
        first_frame: int,
        cache_source: torch.Tensor | None = None,
    ) -> tuple[mx.array, mx.array]:
        """mel ``(1, T, 80)`` + f0 ``(1, T')`` -> (wave, source) from output frame ``first_frame`` on.

        As the PyTorch vocoder windows its decoder (``models.vocoder.window``): only the windows covering
        frames ``first_frame..`` run (each with its left and right context), and none runs convolutions over
        more than :attr:`conv_limit` samples (Metal's convolutions unfold their input: the transient grows with
        it). Each window is evaluated before the next, so the peak is one window's. ``cache_source (1, 1, n)``
        (CosyVoice2 streaming) replaces the first n source samples: whole calls only (no frame skipped).
        """
        frames = f0.shape[-1]  # CosyVoice3 streaming: the f0 look-ahead frames are context only
        output_frames = frames - self.decoder_lookahead - 1 if not finalize else frames
        if not 0 <= first_frame <= output_frames:
            raise ValueError(f"first_frame must be in 0..{output_frames} for this call, got {first_frame}")
        windows = plan_windows(frames, output_frames, first_frame, self.conv_limit, self.window_rules)
        source_start = windows[0].start
        source = self.m_source(f0, noise, first_frame=source_start)
        if cache_source is not None and cache_source.shape[-1]:
            if source_start:
                raise ValueError("cache_source is for whole calls (CosyVoice2 streaming), not with first_frame")
            cached = HiFT._checked_cache(self, cache_source, torch.empty(1, 1, source.shape[-1]))
            source = mx.concatenate([to_mlx(cached[0]), source[:, cached.shape[-1] :]], axis=1)
        step = self.config.samples_per_frame
        pieces = []
        for window in windows:
            last = window.stop == frames
            wave = self.decode(
                mel[:, window.start : window.stop],
                source[:, (window.start - source_start) * step : (window.stop - source_start) * step],
                finalize=finalize if last else True,
            )
            piece = wave[:, (window.keep_start - window.start) * step : (window.keep_stop - window.start) * step]
            mx.eval(piece)
            pieces.append(piece)
        wave = pieces[0] if len(pieces) == 1 else mx.concatenate(pieces, axis=1)
        return wave, source[:, (first_frame - source_start) * step :]


class MlxHiFT(WindowedVocoder):
    """Owns the causal vocoder in MLX: ``f0_predictor``, ``m_source``, the mel decoder and the STFT pair."""

    streaming_lag = HiFT.streaming_lag

    def __init__(self, config: HiFTConfig):
        super().__init__()
        if not config.causal:
            raise MlxHiFTError("MlxHiFT is CosyVoice3's CausalHiFTGenerator; CosyVoice2's is hift_v2.MlxHiFTV2")
        self.config = config
        stages = len(config.upsample_rates)
        bins2 = config.n_fft + 2
        self.f0_predictor = F0Predictor(config.f0_in_channels, config.f0_cond_channels, causal=True)
        self.m_source = Source(config)
        pre_kernel = config.conv_pre_look_right + 1
        self.conv_pre = PaddedConv1d(
            config.in_channels, config.base_channels, pre_kernel, padding=(0, causal_padding(pre_kernel))
        )
        channels = [config.base_channels // 2**i for i in range(stages + 1)]
        self.ups = [
            CausalUpsample(channels[i], channels[i + 1], kernel, rate)
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
                down = PaddedConv1d(bins2, channels[i + 1], 2 * rate, stride=rate, padding=(rate - 1, 0))
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(channels[i + 1], kernel, list(dilations), causal=True))
        self.resblocks = [
            ResBlock(channels[i + 1], kernel, list(dilations), causal=True)
            for i in range(stages)
            for kernel, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes)
        ]
        self.conv_post = PaddedConv1d(channels[-1], bins2, 7, padding=(causal_padding(7), 0))
        self.stft = ConvSTFT(config.n_fft, config.hop_len)
        self.default_noise: SourceNoise = FixedUniformSourceNoise()

    @classmethod
    def from_checkpoint(cls, config: HiFTConfig, path: str | Path, *, cache_dir: Path | None = None) -> "MlxHiFT":
        model = cls(config)
        model.load_weights(list(load_converted(path, KEY_MAP, cache_dir=cache_dir).items()), strict=True)
        for up in model.ups:
            up.prepare()
        mx.eval(model.parameters())
        return model

    @property
    def decoder_lookahead(self) -> int:
        return self.conv_pre.pad_right

    def inference(
        self,
        mel: torch.Tensor,
        *,
        finalize: bool = True,
        cache_source: torch.Tensor | None = None,
        noise: SourceNoise | None = None,
        first_frame: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel ``(1, 80, T)`` -> ``(wav (1, N), source (1, 1, N_src))`` float32 CPU tensors, as the PyTorch HiFT.

        ``N = 480 T`` (``finalize=False``: ``480 (T - 8)``, source ``480 (T - 3)``). ``first_frame`` k returns
        the audio from sample ``480 k`` on, decoding only the frames it needs (:meth:`decode_windows`).
        """
        if cache_source is not None:
            raise ValueError("cache_source is for the CosyVoice2 vocoder; CosyVoice3 streams with finalize=False")
        HiFT._checked_mel(self, mel, finalize)
        frames = to_mlx(mel.float().cpu()).transpose(0, 2, 1)  # (1, T, 80)
        f0 = self.f0_predictor(frames, finalize=finalize)
        wav, source = self.decode_windows(
            frames, f0, noise if noise is not None else self.default_noise, finalize, first_frame
        )
        return to_torch(wav), to_torch(source[:, None, :])

    def f0(self, mel: torch.Tensor, *, finalize: bool = True) -> torch.Tensor:
        """mel ``(1, 80, T)`` -> f0 ``(1, T')`` Hz as a float32 torch tensor."""
        return to_torch(self.f0_predictor(to_mlx(mel.float().cpu()).transpose(0, 2, 1), finalize=finalize))

    def decode(self, mel: mx.array, source: mx.array, *, finalize: bool = True) -> mx.array:
        """mel ``(1, T, 80)`` + source ``(1, 480 T)`` -> waveform ``(1, 480 T)`` (finalize=False: ``480 (T - 5)``)."""
        config = self.config
        spectrum = self.stft.stft(source)
        if finalize:
            x = self.conv_pre(mel)
        else:
            x = self.conv_pre(mel, pad_right=False)  # the last frames are real look-ahead
            spectrum = spectrum[:, : x.shape[1] * math.prod(config.upsample_rates) + 1]
        wav = synthesise(self, x, spectrum)
        if not finalize:
            wav = wav[:, : -config.samples_per_frame]
        return mx.clip(wav, -config.audio_limit, config.audio_limit)


def load_mlx_hift(config_path: str | Path, checkpoint_path: str | Path, **kwargs) -> MlxHiFT:
    """Build the MLX vocoder from a model folder's yaml and its ``hift.pt``."""
    config = HiFTConfig.from_yaml(read_yaml_config(config_path).get("hift"))
    return MlxHiFT.from_checkpoint(config, checkpoint_path, **kwargs)


def synthesise(vocoder, x: mx.array, spectrum: mx.array) -> mx.array:
    """The body both versions' MLX vocoders share: ``x`` ``(1, T, C)`` after ``conv_pre`` and the source's STFT
    ``spectrum`` -> the waveform ``(1, 480 T)`` before clipping (upsampling with the source mixed in at each
    rate, the averaged residual blocks, magnitude and phase, the inverse STFT)."""
    config = vocoder.config
    kernels = len(config.resblock_kernel_sizes)
    for i, up in enumerate(vocoder.ups):
        x = up(nn.leaky_relu(x, config.lrelu_slope))
        if i == len(vocoder.ups) - 1:
            x = reflect_pad_time(x, 1, 0)  # one more frame: the STFT has frames + 1
        x = vocoder.source_resblocks[i](vocoder.source_downs[i](spectrum)) + x
        mixed = vocoder.resblocks[i * kernels](x)
        for j in range(1, kernels):
            mixed = mixed + vocoder.resblocks[i * kernels + j](x)
        x = mixed / kernels
    x = vocoder.conv_post(nn.leaky_relu(x, _FINAL_LEAKY_SLOPE))
    bins = config.n_fft // 2 + 1
    magnitude = mx.minimum(mx.exp(x[..., :bins]), _MAX_MAGNITUDE)
    phase = mx.sin(x[..., bins:])
    return vocoder.stft.istft(mx.concatenate([magnitude * mx.cos(phase), magnitude * mx.sin(phase)], axis=-1))
