"""The HiFT vocoder in MLX: mel -> 24 kHz wave (mirrors ``models.vocoder.hift``).

mel -> f0 (float32) -> harmonic source -> STFT of the source fused at every upsampling stage ->
magnitude/phase -> iSTFT -> clamp. One class serves both versions, as the PyTorch HiFT does: its
``HiFTConfig.causal`` (the YAML's vocoder class, the ``hift_class`` of :mod:`cosyvoice_mac.versions`)
chooses CosyVoice3's causal convolutions, held phase, fixed noise and ``finalize=False`` streaming, or
CosyVoice2's symmetric convolutions, transposed-conv upsampling, interpolated phase, Gaussian noise and
``cache_source`` streaming. The frame-rate phase integral, its interpolation and the source noise are the
PyTorch module's own CPU code (``HarmonicSource`` and the :class:`SourceNoise` objects), so both engines
excite the filter with identical numbers. Long mels decode in bounded windows (the PyTorch vocoder's
window plan). Same :class:`HiFTConfig` and ``hift.pt``; ``inference`` takes and returns PyTorch CPU
tensors like :meth:`cosyvoice_mac.models.vocoder.HiFT.inference`.
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
from cosyvoice_mac.mlx.hift_layers import (
    CausalUpsample,
    ConvSTFT,
    F0Predictor,
    PaddedConv1d,
    ResBlock,
    TransposedUpsample,
    reflect_pad_time,
)
from cosyvoice_mac.models.vocoder import (
    FixedUniformSourceNoise,
    GaussianSourceNoise,
    HiFT,
    HiFTConfig,
    SourceNoise,
)
from cosyvoice_mac.models.vocoder.hift import _FINAL_LEAKY_SLOPE, _MAX_MAGNITUDE
from cosyvoice_mac.models.vocoder.layers import causal_padding
from cosyvoice_mac.models.vocoder.source import HarmonicSource
from cosyvoice_mac.models.vocoder.window import plan_windows

MLX_CONV_WINDOW = 65536  # samples: ~10.9 s of audio per decoder window (the MPS limit, a bounded transient)
LOW_MEMORY_CONV_WINDOW = 32768  # ~5.4 s per window in the low-memory mode
SOURCE_CHUNK_FRAMES = 64  # ~1.3 s of excitation per evaluation (~5 MB of intermediates)

KEY_MAP = ((r"^f0_predictor\.condnet\.(\d+)\.", lambda m: f"f0_predictor.condnet.{int(m.group(1)) // 2}."),)


class Source(nn.Module):
    """Owns ``l_linear``: f0 ``(1, T)`` -> source ``(1, T * samples_per_frame)``; the phase is held per frame
    (causal vocoder) or linearly interpolated (CosyVoice2's), the PyTorch module's ``nearest_phase``."""

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
            nearest_phase=config.causal,
        )

    def __call__(self, f0: mx.array, noise: SourceNoise, first_frame: int = 0) -> mx.array:
        """From ``first_frame`` on only: ``(1, (T - first_frame) * samples_per_frame)``, equal to those samples
        of a whole call (the phase is integrated, and interpolated, and the noise drawn, over all T frames).

        The excitation is ``harmonics`` channels at the sample rate (~40 float32 per output sample over its
        intermediates): it is built and evaluated :data:`SOURCE_CHUNK_FRAMES` frames at a time, so the MLX peak
        stays a window's, not the call's, while only the one-channel source is kept whole."""
        rules = self._rules
        if noise.harmonics != rules.harmonics:
            raise ValueError(f"source noise has {noise.harmonics} harmonics, the vocoder uses {rules.harmonics}")
        total, step = f0.shape[-1], rules.samples_per_frame
        f0_cpu = to_torch(f0.astype(mx.float32))
        phase = rules.frame_phase(f0_cpu)  # (1, H, T) at the frame rate
        if not rules.nearest_phase:  # linear interpolation reads neighbouring frames: interpolate all at once
            phase = F.interpolate(phase, scale_factor=float(step), mode="linear")
        drawn = noise.take(total * step)
        pieces = []
        # chunk edges on multiples of the chunk from frame 0, so a call from first_frame splits as a whole call
        edges = range(first_frame - first_frame % SOURCE_CHUNK_FRAMES + SOURCE_CHUNK_FRAMES, total, SOURCE_CHUNK_FRAMES)
        for start, stop in zip([first_frame, *edges], [*edges, total]):
            piece = self.excite(f0_cpu, phase, drawn, start, stop)
            mx.eval(piece)
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else mx.concatenate(pieces, axis=1)

    def excite(self, f0: torch.Tensor, phase: torch.Tensor, drawn: torch.Tensor, start: int, stop: int) -> mx.array:
        """Frames ``start..stop`` of the source: ``(1, (stop - start) * samples_per_frame)``."""
        rules = self._rules
        step, frames = rules.samples_per_frame, stop - start
        if rules.nearest_phase:  # (1, T', 1, H): each frame's sines held for `step` samples
            sines = mx.sin(to_mlx(phase[:, :, start:stop]).transpose(0, 2, 1))[:, :, None, :] * rules.sine_amp
        else:
            held = to_mlx(phase[:, :, start * step : stop * step]).transpose(0, 2, 1)
            sines = mx.sin(held).reshape(1, frames, step, -1) * rules.sine_amp
        voiced = (to_mlx(f0[:, start:stop]) > rules.voiced_threshold)[:, :, None, None]  # (1, T', 1, 1)
        noise_amp = mx.where(voiced, rules.noise_std, rules.sine_amp / 3).astype(mx.float32)
        unit_noise = to_mlx(drawn[:, :, start * step : stop * step]).transpose(0, 2, 1).reshape(1, frames, step, -1)
        excitation = sines * voiced + unit_noise * noise_amp  # (1, T', step, H)
        return mx.tanh(self.l_linear(excitation.reshape(1, frames * step, -1))[..., 0])


class MlxHiFT(nn.Module):
    """Owns the whole vocoder in MLX: ``f0_predictor``, ``m_source``, the mel decoder and the STFT pair.

    Parameter names equal the converted ``hift.pt``'s; the default source noise is per version, as in the
    PyTorch HiFT (pass ``noise=`` to ``inference`` to replay or seed it).
    """

    decoder_lookahead = HiFT.decoder_lookahead
    streaming_lag = HiFT.streaming_lag

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.config = config
        causal = config.causal
        stages = len(config.upsample_rates)
        bins2 = config.n_fft + 2  # real and imaginary parts of n_fft/2 + 1 bins
        self.f0_predictor = F0Predictor(config.f0_in_channels, config.f0_cond_channels, causal=causal)
        self.m_source = Source(config)
        if causal:
            pre_kernel = config.conv_pre_look_right + 1
            pre_padding = (0, causal_padding(pre_kernel))
        else:
            pre_kernel, pre_padding = 7, (3, 3)
        self.conv_pre = PaddedConv1d(config.in_channels, config.base_channels, pre_kernel, padding=pre_padding)
        channels = [config.base_channels // 2**i for i in range(stages + 1)]
        upsample = CausalUpsample if causal else TransposedUpsample
        self.ups = [
            upsample(channels[i], channels[i + 1], kernel, rate)
            for i, (rate, kernel) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes))
        ]
        # The source STFT (hop 4 after the last upsampling) is brought down to each stage's rate.
        self.source_downs, self.source_resblocks = [], []
        downsample_rates = [math.prod(config.upsample_rates[i + 1 :]) for i in range(stages)]
        for i, (rate, kernel, dilations) in enumerate(
            zip(downsample_rates, config.source_resblock_kernel_sizes, config.source_resblock_dilation_sizes)
        ):
            if rate == 1:
                down = PaddedConv1d(bins2, channels[i + 1], 1)
            else:
                padding = (rate - 1, 0) if causal else (rate // 2, rate // 2)
                down = PaddedConv1d(bins2, channels[i + 1], 2 * rate, stride=rate, padding=padding)
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(channels[i + 1], kernel, list(dilations), causal=causal))
        self.resblocks = [
            ResBlock(channels[i + 1], kernel, list(dilations), causal=causal)
            for i in range(stages)
            for kernel, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes)
        ]
        post_padding = (causal_padding(7), 0) if causal else (3, 3)
        self.conv_post = PaddedConv1d(channels[-1], bins2, 7, padding=post_padding)
        self.stft = ConvSTFT(config.n_fft, config.hop_len)
        self.default_noise: SourceNoise = (
            FixedUniformSourceNoise() if causal else GaussianSourceNoise(harmonics=config.nb_harmonics + 1)
        )
        self.conv_limit: int | None = MLX_CONV_WINDOW  # the longest conv time axis of one window; None: one shot
        self._window_rules: HiFT | None = None

    @classmethod
    def from_checkpoint(cls, config: HiFTConfig, path: str | Path, *, cache_dir: Path | None = None) -> "MlxHiFT":
        model = cls(config)
        model.load_weights(list(load_converted(path, KEY_MAP, cache_dir=cache_dir).items()), strict=True)
        kernels = [up.prepare() for up in model.ups]
        mx.eval(model.parameters(), kernels)  # made here, used by the decode thread
        return model

    @property
    def window_rules(self) -> HiFT:
        """The PyTorch HiFT of this config on the meta device: its modules give each window's context."""
        if self._window_rules is None:
            with torch.device("meta"):
                self._window_rules = HiFT(self.config)
        return self._window_rules

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

        ``N = 480 T`` (CosyVoice3 ``finalize=False``: ``480 (T - 8)``, source ``480 (T - 3)``).
        ``cache_source (1, 1, n)`` (CosyVoice2 streaming) replaces the first n source samples. ``first_frame``
        k returns the audio from sample ``480 k`` on, decoding only the frames it needs (:meth:`decode_windows`).
        """
        if cache_source is not None and self.config.causal:
            raise ValueError("cache_source is for the CosyVoice2 vocoder; CosyVoice3 streams with finalize=False")
        HiFT._checked_mel(self, mel, finalize)
        frames = to_mlx(mel.float().cpu()).transpose(0, 2, 1)  # (1, T, 80)
        f0 = self.f0_predictor(frames, finalize=finalize)
        noise = noise if noise is not None else self.default_noise
        wav, source = self.decode_windows(frames, f0, noise, finalize, first_frame, cache_source)
        return to_torch(wav), to_torch(source[:, None, :])

    def f0(self, mel: torch.Tensor, *, finalize: bool = True) -> torch.Tensor:
        """mel ``(1, 80, T)`` -> f0 ``(1, T')`` Hz as a float32 torch tensor."""
        return to_torch(self.f0_predictor(to_mlx(mel.float().cpu()).transpose(0, 2, 1), finalize=finalize))

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

    def decode(self, mel: mx.array, source: mx.array, *, finalize: bool = True) -> mx.array:
        """mel ``(1, T, 80)`` + source ``(1, 480 T)`` -> waveform ``(1, 480 T)``.

        A causal ``finalize=False`` call treats the last 4 frames as look-ahead and returns ``480 (T - 5)``.
        """
        config = self.config
        spectrum = self.stft.stft(source)
        if finalize or not config.causal:
            x = self.conv_pre(mel)
        else:
            x = self.conv_pre(mel, pad_right=False)  # the last frames are real look-ahead
            spectrum = spectrum[:, : x.shape[1] * math.prod(config.upsample_rates) + 1]
        kernels = len(config.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(nn.leaky_relu(x, config.lrelu_slope))
            if i == len(self.ups) - 1:
                x = reflect_pad_time(x, 1, 0)  # one more frame: the STFT has frames + 1
            x = self.source_resblocks[i](self.source_downs[i](spectrum)) + x
            mixed = self.resblocks[i * kernels](x)
            for j in range(1, kernels):
                mixed = mixed + self.resblocks[i * kernels + j](x)
            x = mixed / kernels
        x = self.conv_post(nn.leaky_relu(x, _FINAL_LEAKY_SLOPE))
        bins = config.n_fft // 2 + 1
        magnitude = mx.minimum(mx.exp(x[..., :bins]), _MAX_MAGNITUDE)
        phase = mx.sin(x[..., bins:])  # upstream feeds sin(raw) as the phase angle
        wav = self.stft.istft(mx.concatenate([magnitude * mx.cos(phase), magnitude * mx.sin(phase)], axis=-1))
        if not finalize and config.causal:
            wav = wav[:, : -config.samples_per_frame]
        return mx.clip(wav, -config.audio_limit, config.audio_limit)


def load_mlx_hift(config_path: str | Path, checkpoint_path: str | Path, **kwargs) -> MlxHiFT:
    """Build the MLX vocoder of a model folder's version from its yaml and ``hift.pt``."""
    config = HiFTConfig.from_yaml(read_yaml_config(config_path).get("hift"))
    return MlxHiFT.from_checkpoint(config, checkpoint_path, **kwargs)
