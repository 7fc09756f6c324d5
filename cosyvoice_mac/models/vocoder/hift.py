"""HiFT vocoder (neural source filter + iSTFT head): 80-bin log-mel at 50 Hz -> 24 kHz waveform.

One module serves both released vocoders:

* CosyVoice2 ``HiFTGenerator``: non-causal convs, transposed-conv upsampling, Gaussian source noise
  drawn per call, optional ``cache_source`` (streaming) overwriting the start of the source;
* CosyVoice3 ``CausalHiFTGenerator``: causal convs (conv_pre with 4 look-ahead frames), nearest +
  causal-conv upsampling, a fixed uniform noise buffer, and ``finalize=False`` for streaming, which
  emits ``480 (T - 8)`` samples and uses the last 8 frames only as context.

Pipeline: mel -> f0 (Hz per frame) -> harmonic source (1 sample per output sample) -> STFT of the
source (n_fft 16, hop 4) fused at every upsampling stage of the mel decoder -> magnitude/phase ->
iSTFT -> clamp to +-0.99.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...checkpoint import load_checkpoint, load_strict
from ...config import ConfigError, read_yaml_config, tag_name
from ...device import conv_length_limit, is_cuda
from .f0 import F0Predictor
from .layers import CausalUpsample, Keep, PaddedConv1d, ResBlock, causal_padding
from .source import FixedUniformSourceNoise, GaussianSourceNoise, HarmonicSource, SourceNoise
from .stft import ConvSTFT
from .window import plan_windows

_GENERATORS = {"HiFTGenerator": False, "CausalHiFTGenerator": True}  # class name -> causal
_F0_PREDICTORS = {"ConvRNNF0Predictor": False, "CausalConvRNNF0Predictor": True}
_FINAL_LEAKY_SLOPE = 0.01  # upstream calls F.leaky_relu(x) with its default slope before conv_post
_MAX_MAGNITUDE = 100.0


def _keep_all(activation: torch.Tensor, factor: int) -> torch.Tensor:
    return activation  # one line alone: nothing padded


@dataclass(frozen=True)
class HiFTConfig:
    """Hyper-parameters of the ``hift:`` yaml node; defaults are upstream's constructor defaults."""

    causal: bool
    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 22050
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 8)
    upsample_kernel_sizes: tuple[int, ...] = (16, 16)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    conv_pre_look_right: int = 4
    f0_in_channels: int = 80
    f0_cond_channels: int = 512
    f0_num_class: int = 1

    @property
    def samples_per_frame(self) -> int:
        """Output samples per mel frame: prod(upsample_rates) * hop (480 for the released models)."""
        return math.prod(self.upsample_rates) * self.hop_len

    @classmethod
    def from_yaml(cls, node: dict) -> HiFTConfig:
        """Build from the parsed ``hift:`` node (``read_yaml_config(path)['hift']``); unknown keys are ignored."""
        if not isinstance(node, dict):
            raise ConfigError("the 'hift' config section must be a mapping tagged with the vocoder class")
        generator = tag_name(node)
        if generator not in _GENERATORS:
            raise ConfigError(
                f"hift is {generator or 'untagged'}; supported vocoders: {', '.join(_GENERATORS)} "
                "(CosyVoice2 / Fun-CosyVoice3 model folders)"
            )
        causal = _GENERATORS[generator]
        predictor = node.get("f0_predictor") or {}
        predictor_name = tag_name(predictor) if isinstance(predictor, dict) else ""
        if _F0_PREDICTORS.get(predictor_name) is not causal:
            wanted = "CausalConvRNNF0Predictor" if causal else "ConvRNNF0Predictor"
            raise ConfigError(f"hift.f0_predictor is {predictor_name or 'missing'}; {generator} needs {wanted}")
        known = {f.name for f in fields(cls)}
        values = {key: node[key] for key in known if key in node and key != "causal"}
        istft = node.get("istft_params") or {}
        values.update({key: istft[key] for key in ("n_fft", "hop_len") if key in istft})
        for ours, theirs in (
            ("f0_in_channels", "in_channels"),
            ("f0_cond_channels", "cond_channels"),
            ("f0_num_class", "num_class"),
        ):
            if theirs in predictor:
                values[ours] = predictor[theirs]
        for key in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes", "source_resblock_kernel_sizes"):
            if key in values:
                values[key] = tuple(int(v) for v in values[key])
        for key in ("resblock_dilation_sizes", "source_resblock_dilation_sizes"):
            if key in values:
                values[key] = tuple(tuple(int(v) for v in dilations) for dilations in values[key])
        config = cls(causal=causal, **values)
        config.validate()
        return config

    def validate(self) -> None:
        where = "hift"
        if self.sampling_rate == 22050:
            raise ConfigError(
                f"{where}.sampling_rate 22050 selects CosyVoice-1's sine generator, which is not supported"
            )
        stages = len(self.upsample_rates)
        per_stage = (self.upsample_kernel_sizes, self.source_resblock_kernel_sizes, self.source_resblock_dilation_sizes)
        if any(len(values) != stages for values in per_stage):
            raise ConfigError(
                f"{where}: upsample_rates, upsample_kernel_sizes and source_resblock_* need equal lengths"
            )
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ConfigError(f"{where}: resblock_kernel_sizes and resblock_dilation_sizes need equal lengths")
        if self.base_channels % (2**stages):
            raise ConfigError(f"{where}.base_channels {self.base_channels} must be divisible by 2**{stages}")
        if not self.causal and any((k - u) % 2 for k, u in zip(self.upsample_kernel_sizes, self.upsample_rates)):
            raise ConfigError(f"{where}: kernel - rate must be even for every upsampling layer (length preserving)")
        if self.f0_num_class != 1:
            raise ConfigError(f"{where}.f0_predictor.num_class must be 1, got {self.f0_num_class}")
        if self.causal and self.nb_harmonics != 8:
            raise ConfigError(f"{where}.nb_harmonics must be 8 for CausalHiFTGenerator (its fixed noise has 9 columns)")


class HiFT(nn.Module):
    """Owns the whole vocoder: ``f0_predictor``, ``m_source``, the mel decoder and the STFT pair.

    State-dict keys equal the official ``hift.pt`` after weight-norm folding. The default source noise
    is per version (see :mod:`.source`); pass ``noise=`` to ``inference`` to replay or seed it.
    """

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.config = config
        causal = config.causal
        stages = len(config.upsample_rates)
        bins2 = config.n_fft + 2  # real and imaginary parts of n_fft/2 + 1 bins
        self.f0_predictor = F0Predictor(
            config.f0_in_channels, config.f0_cond_channels, causal=causal, num_class=config.f0_num_class
        )
        self.m_source = HarmonicSource(
            sampling_rate=config.sampling_rate,
            samples_per_frame=config.samples_per_frame,
            harmonics=config.nb_harmonics + 1,
            sine_amp=config.nsf_alpha,
            noise_std=config.nsf_sigma,
            voiced_threshold=config.nsf_voiced_threshold,
            nearest_phase=causal,
        )
        if causal:
            pre_kernel = config.conv_pre_look_right + 1
            pre_padding = (0, causal_padding(pre_kernel))
        else:
            pre_kernel, pre_padding = 7, (3, 3)
        self.conv_pre = PaddedConv1d(config.in_channels, config.base_channels, pre_kernel, padding=pre_padding)

        channels = [config.base_channels // 2**i for i in range(stages + 1)]
        self.ups = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes)):
            if causal:
                self.ups.append(CausalUpsample(channels[i], channels[i + 1], kernel, rate))
            else:
                padding = (kernel - rate) // 2
                self.ups.append(nn.ConvTranspose1d(channels[i], channels[i + 1], kernel, rate, padding=padding))

        # The source STFT (hop 4 after the last upsampling) is brought down to each stage's rate.
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        downsample_rates = [math.prod(config.upsample_rates[i + 1 :]) for i in range(stages)]
        for i, (rate, kernel, dilations) in enumerate(
            zip(downsample_rates, config.source_resblock_kernel_sizes, config.source_resblock_dilation_sizes)
        ):
            if rate == 1:
                down = PaddedConv1d(bins2, channels[i + 1], 1)
            elif causal:
                down = PaddedConv1d(bins2, channels[i + 1], 2 * rate, stride=rate, padding=(rate - 1, 0))
            else:
                down = PaddedConv1d(bins2, channels[i + 1], 2 * rate, stride=rate, padding=(rate // 2, rate // 2))
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(channels[i + 1], kernel, list(dilations), causal=causal))

        self.resblocks = nn.ModuleList(
            ResBlock(channels[i + 1], kernel, list(dilations), causal=causal)
            for i in range(stages)
            for kernel, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes)
        )
        post_padding = (causal_padding(7), 0) if causal else (3, 3)
        self.conv_post = PaddedConv1d(channels[-1], bins2, 7, padding=post_padding)
        self.stft = ConvSTFT(config.n_fft, config.hop_len)
        self.default_noise: SourceNoise = (
            FixedUniformSourceNoise() if causal else GaussianSourceNoise(harmonics=config.nb_harmonics + 1)
        )
        # "auto": the device's limit (MPS: 65536); an int forces windows (tests on the CPU); None: one shot.
        self.conv_limit: int | None | str = "auto"
        self.streamed_graphs = None  # CUDA: CosyVoice3's streamed calls replayed as graphs (see _cuda_graphs)

    def _apply(self, fn, *args, **kwargs):
        if getattr(self, "streamed_graphs", None) is not None:  # moved or cast: the graphs would read freed memory
            self.streamed_graphs.clear()
        return super()._apply(fn, *args, **kwargs)

    def _cuda_graphs(self, device: torch.device):
        """Where ``device`` is CUDA, the streamed calls' graphs (``models/cuda/vocoder_graphs.py``), made on first use;
        else None. Imported here only: the CPU, MPS and MLX never load the CUDA tuning."""
        if not is_cuda(device):
            return None
        if self.streamed_graphs is None:
            from cosyvoice_mac.models.cuda.vocoder_graphs import StreamedCallGraphs

            self.streamed_graphs = StreamedCallGraphs()
        return self.streamed_graphs

    @property
    def decoder_lookahead(self) -> int:
        """Mel frames conv_pre reads ahead (CosyVoice3: 4); CosyVoice2 is non-causal (0)."""
        return self.conv_pre.pad_right if self.config.causal else 0

    @property
    def streaming_lag(self) -> int:
        """Mel frames a ``finalize=False`` call holds back: f0 and conv_pre look-ahead plus one trimmed frame."""
        return self.f0_predictor.lookahead + self.decoder_lookahead + 1 if self.config.causal else 0

    @torch.inference_mode()
    def inference(
        self,
        mel: torch.Tensor,
        *,
        finalize: bool = True,
        cache_source: torch.Tensor | None = None,
        noise: SourceNoise | None = None,
        first_frame: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel ``(1, 80, T)`` (natural-log mel, 50 Hz) -> ``(wav (1, N), source (1, 1, N_src))``, float32.

        ``N = 480 T`` (CosyVoice3 ``finalize=False``: ``480 (T - 8)``, source ``480 (T - 3)``).
        ``cache_source (1, 1, n)`` (CosyVoice2 streaming) replaces the first n source samples.
        ``first_frame`` k returns only the audio (and source) from sample ``480 k`` on, computing only
        the decoder windows it needs (CosyVoice3 streaming: no re-vocoding of what was already sent).
        Under a conv length limit (:attr:`conv_limit`) the decoder runs in bounded windows.
        Tensors come back on the module's device; on CUDA CosyVoice3's streamed calls replay as graphs
        (``models/cuda/vocoder_graphs.py``).
        """
        parameter = self.conv_pre.weight
        if parameter.dtype != torch.float32:
            raise ValueError(f"HiFT runs in float32 (Snake and phase need it), not {parameter.dtype}: call .float()")
        mel = self._checked_mel(mel, finalize).to(parameter.device, parameter.dtype)
        fixed_noise = self.default_noise if isinstance(self.default_noise, FixedUniformSourceNoise) else None
        if (
            not finalize
            and fixed_noise is not None
            and noise in (None, fixed_noise)
            and cache_source is None
            and (graphs := self._cuda_graphs(parameter.device)) is not None
            and graphs.wanted(parameter.device)
        ):

            def call(static_mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return self._vocode(static_mel, False, None, fixed_noise, first_frame)

            return graphs.run(self, call, mel, first_frame, lambda: fixed_noise.device_copy)
        return self._vocode(mel, finalize, cache_source, noise, first_frame)

    def _vocode(self, mel, finalize: bool, cache_source, noise: SourceNoise | None, first_frame: int) -> tuple:
        """:meth:`inference` on a checked mel on the module's device, run eagerly."""
        f0 = self.f0_predictor(mel, finalize=finalize)
        frames = f0.shape[-1]  # CosyVoice3 streaming: the f0 look-ahead frames are context only
        output_frames = frames - self.decoder_lookahead - 1 if not finalize else frames
        if not 0 <= first_frame <= output_frames:
            raise ValueError(f"first_frame must be in 0..{output_frames} for this call, got {first_frame}")
        windows = plan_windows(frames, output_frames, first_frame, self.active_conv_limit(), self)
        source_start = windows[0].start
        source = self.m_source(f0, noise if noise is not None else self.default_noise, first_frame=source_start)
        if cache_source is not None and cache_source.shape[-1]:
            if source_start:
                raise ValueError("cache_source is for whole calls (CosyVoice2 streaming), not with first_frame")
            source[:, :, : cache_source.shape[-1]] = self._checked_cache(cache_source, source)
        step = self.config.samples_per_frame
        pieces = []
        for window in windows:
            last = window.stop == frames
            wave = self.decode(
                mel[:, :, window.start : window.stop],
                source[:, :, (window.start - source_start) * step : (window.stop - source_start) * step],
                finalize=finalize if last else True,
            )
            pieces.append(wave[:, (window.keep_start - window.start) * step : (window.keep_stop - window.start) * step])
        wave = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
        return wave, source[:, :, (first_frame - source_start) * step :]

    def active_conv_limit(self) -> int | None:
        """The longest conv time axis allowed now: :attr:`conv_limit`, or the device's policy when "auto"."""
        if self.conv_limit == "auto":
            return conv_length_limit(self.conv_pre.weight.device)
        return self.conv_limit

    def decode(self, mel: torch.Tensor, source: torch.Tensor, *, finalize: bool = True) -> torch.Tensor:
        """mel ``(1, 80, T)`` + source ``(1, 1, 480 T)`` -> waveform ``(1, 480 T)``.

        A causal ``finalize=False`` call treats the last 4 frames as look-ahead and returns ``480 (T - 5)``.
        """
        return self.waveform(self.decoder_features(mel, self.stft.stft(source[:, 0]), finalize=finalize), finalize)

    def decoder_features(
        self, mel: torch.Tensor, spectrum: torch.Tensor, *, finalize: bool = True, keep: Keep | None = None
    ) -> torch.Tensor:
        """mel ``(B, 80, T)`` + the source's STFT ``spectrum (B, n_fft + 2, 120 T + 1)`` -> the log-magnitude and
        phase channels ``(B, n_fft + 2, 120 T + 1)`` the inverse STFT turns into the waveform.

        ``keep(z, factor)`` (a batch of padded lines, ``vocoder/batch.py``) zeroes each line's padding in an
        activation at ``factor`` times the mel rate after every convolution, so that a non-causal convolution reads
        zeros past a line's end, as the line alone reads its zero padding.
        """
        config = self.config
        block_keep, keep = keep, keep or _keep_all
        if finalize or not config.causal:
            x = keep(self.conv_pre(mel), 1)
        else:
            x = self.conv_pre(mel, pad_right=False)  # the last frames are real look-ahead
            spectrum = spectrum[:, :, : x.shape[-1] * math.prod(config.upsample_rates) + 1]

        kernels, factor = len(config.resblock_kernel_sizes), 1
        for i, up in enumerate(self.ups):
            factor *= config.upsample_rates[i]
            x = keep(up(F.leaky_relu(x, config.lrelu_slope)), factor)
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # one more frame: the STFT has frames + 1
            downsampled = keep(self.source_downs[i](spectrum), factor)
            x = self.source_resblocks[i](downsampled, block_keep, factor).add_(x)
            mixed = self.resblocks[i * kernels](x, block_keep, factor)
            for j in range(1, kernels):
                mixed += self.resblocks[i * kernels + j](x, block_keep, factor)
            x = mixed.div_(kernels)
        return self.conv_post(F.leaky_relu(x, _FINAL_LEAKY_SLOPE))

    def waveform(self, features: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """:meth:`decoder_features` ``(B, n_fft + 2, frames)`` -> waveform ``(B, hop (frames - 1))``, clamped."""
        config = self.config
        bins = config.n_fft // 2 + 1
        magnitude = torch.exp(features[:, :bins]).clamp_(max=_MAX_MAGNITUDE)
        phase = torch.sin(features[:, bins:])  # upstream feeds sin(raw) as the phase angle
        wav = self.stft.istft(torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1))
        if not finalize and config.causal:
            wav = wav[:, : -config.samples_per_frame]
        return wav.clamp_(-config.audio_limit, config.audio_limit)

    def _checked_mel(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        channels = self.config.in_channels
        if mel.dim() != 3 or mel.shape[0] != 1 or mel.shape[1] != channels:
            raise ValueError(f"the vocoder takes one mel of shape (1, {channels}, T), got {tuple(mel.shape)}")
        if not mel.is_floating_point():
            raise ValueError(f"the vocoder takes a floating-point mel, got {mel.dtype}")
        if not finalize and not self.config.causal:
            raise ValueError(
                "finalize=False is for the causal CosyVoice3 vocoder; CosyVoice2 streams with cache_source"
            )
        minimum = self.streaming_lag + 1 if not finalize else 1
        if mel.shape[2] < minimum:
            raise ValueError(f"the vocoder needs at least {minimum} mel frames here, got {mel.shape[2]}")
        return mel

    def _checked_cache(self, cache_source: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        if self.config.causal:
            raise ValueError("cache_source is for the CosyVoice2 vocoder; CosyVoice3 streams with finalize=False")
        if cache_source.dim() != 3 or cache_source.shape[:2] != (1, 1) or cache_source.shape[-1] > source.shape[-1]:
            raise ValueError(
                f"cache_source must have shape (1, 1, n) with n <= {source.shape[-1]} source samples, "
                f"got {tuple(cache_source.shape)}"
            )
        return cache_source.to(source.device, source.dtype)


def load_hift(config_path: str | Path, checkpoint_path: str | Path) -> HiFT:
    """Build the vocoder from a model folder's yaml and load its ``hift.pt`` strictly (CPU, eval mode)."""
    config = HiFTConfig.from_yaml(read_yaml_config(config_path).get("hift"))
    model = HiFT(config)
    load_strict(model, load_checkpoint(checkpoint_path), source=str(checkpoint_path))
    return model.eval()
