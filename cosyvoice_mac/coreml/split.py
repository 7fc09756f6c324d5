"""The split vocoder: f0 graph -> host source -> decoder graph(s) -> host iSTFT normalisation.

:class:`SplitVocoder` owns the host logic and calls graphs through plain callables on numpy arrays,
so the same code runs Core ML models (:mod:`.runtime`), the torch rewrite (:func:`torch_split_vocoder`)
and, in tests, a numpy interpreter of the saved packages. It has the interface the pipeline swaps in:
``inference(mel (1, 80, T), noise=SourceNoise | None) -> (wave (1, 480 T), source (1, 1, 480 T))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig, SourceNoise
from cosyvoice_mac.models.vocoder.source import FixedUniformSourceNoise, GaussianSourceNoise

from .host import HostSource, finish_waveform, interleave, pad_polyphase, plan_chunks, to_numpy_mel
from .rewrite import build_graphs

F0Function = Callable[[np.ndarray], np.ndarray]  # mel (1, 80, T) -> f0 (1, T)
DecodeFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]  # mel, source (1, 4, 120T+4) -> (1, 4, 120T+4)

# Mel frames of context a decoder chunk needs on each side to equal a whole-utterance call. The
# receptive fields are CosyVoice2: +-14 frames; CosyVoice3: 22 mel / 29 source frames left, 4 mel
# frames + 63 source samples right (../shared/research/coreml.md 4.3); both rounded up.
CHUNK_CONTEXT = {False: (16, 16), True: (32, 8)}  # causal -> (left, right)
CHUNK_FRAMES = 128  # 120 T + 4 = 15364 <= 16384, the Neural Engine's reported width limit


@dataclass(frozen=True)
class Decoder:
    """One decoder graph: ``run(mel, source_polyphase)``; ``frames`` fixed size, or None if flexible."""

    run: DecodeFunction
    frames: int | None = None
    max_frames: int = 3000  # flexible graphs: the longest single call (longer mels are chunked)


class SplitVocoder:
    """Owns the host half of the vocoder and the graph callables (see module docstring)."""

    def __init__(
        self,
        config: HiFTConfig,
        source: HostSource,
        f0: F0Function,
        *,
        flexible: Decoder | None = None,
        chunked: Decoder | None = None,
        default_noise: SourceNoise | None = None,
        name: str = "split",
    ):
        if flexible is None and chunked is None:
            raise ValueError("a split vocoder needs a flexible or a fixed-size decoder")
        self.config = config
        self.source = source
        self.f0_function = f0
        self.flexible = flexible
        self.chunked = chunked
        self.context = CHUNK_CONTEXT[config.causal]
        self.default_noise = default_noise if default_noise is not None else default_source_noise(config)
        self.name = name
        self.last_plan: list = []  # decoder calls of the last inference (size, start), for tests and logs

    def inference(
        self,
        mel,
        noise: SourceNoise | None = None,
        *,
        finalize: bool = True,
        cache_source=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel ``(1, 80, T)`` -> ``(wave (1, 480 T), source (1, 1, 480 T))`` float32 CPU tensors.

        ``cache_source (1, 1, n)`` (CosyVoice2 streaming) replaces the first ``n`` source samples.
        """
        if not finalize:
            raise NotImplementedError("the split vocoder decodes whole utterances only (finalize=True)")
        mel = to_numpy_mel(mel)
        if mel.shape[1] != self.config.in_channels or mel.shape[2] < 1:
            raise ValueError(
                f"the vocoder takes a mel of shape (1, {self.config.in_channels}, T >= 1), got {tuple(mel.shape)}"
            )
        if cache_source is not None and self.config.causal:
            raise ValueError("cache_source is for the CosyVoice2 vocoder; CosyVoice3 streams with finalize=False")
        f0 = np.asarray(self.f0_function(mel), dtype=np.float32).reshape(-1)
        if f0.shape[0] != mel.shape[2]:
            raise RuntimeError(f"the f0 graph returned {f0.shape[0]} frames for {mel.shape[2]} mel frames")
        cache = None
        if cache_source is not None:
            cache = np.asarray(torch.as_tensor(cache_source).detach().cpu().float()).reshape(-1)
        source = self.source(f0, noise if noise is not None else self.default_noise, cache_source=cache)
        wave = self.decode(mel, source)
        return torch.from_numpy(wave)[None], torch.from_numpy(source)[None, None]

    def decode(self, mel: np.ndarray, source: np.ndarray) -> np.ndarray:
        """mel ``(1, 80, T)`` + source ``(480 T,)`` -> waveform ``(480 T,)`` float32."""
        frames = mel.shape[2]
        step = self.config.samples_per_frame
        if source.shape[0] != frames * step:
            raise ValueError(f"source has {source.shape[0]} samples, {frames} mel frames need {frames * step}")
        polyphase = pad_polyphase(source, self.config.n_fft)
        if self.chunked is not None and frames >= self.chunked.frames:
            overlap_added = self._chunked(mel, polyphase, self.chunked, self.chunked.frames)
        elif self.flexible is not None and frames <= self.flexible.max_frames:
            self.last_plan = [(frames, 0)]
            overlap_added = interleave(self._checked(self.flexible.run(mel, polyphase), polyphase))
        elif self.flexible is not None:
            overlap_added = self._chunked(mel, polyphase, self.flexible, self.flexible.max_frames)
        else:
            raise ValueError(
                f"{frames} mel frames are fewer than the {self.chunked.frames}-frame chunk of the fixed-size "
                "decoder, and no flexible decoder is loaded"
            )
        return finish_waveform(overlap_added, self.config.audio_limit, self.config.n_fft)

    def _chunked(self, mel: np.ndarray, polyphase: np.ndarray, decoder: Decoder, size: int) -> np.ndarray:
        frames = mel.shape[2]
        rows_per_frame = self.config.samples_per_frame // polyphase.shape[1]  # 120
        half_rows = self.config.n_fft // 2 // polyphase.shape[1]  # padding rows at each end (2)
        pieces, self.last_plan = [], []
        plan = plan_chunks(frames, size, *self.context)
        for index, chunk in enumerate(plan):
            rows = slice(chunk.start * rows_per_frame, (chunk.start + chunk.size) * rows_per_frame + 2 * half_rows)
            window = polyphase[:, :, rows]
            out = self._checked(
                decoder.run(
                    np.ascontiguousarray(mel[:, :, chunk.start : chunk.start + chunk.size]),
                    np.ascontiguousarray(window),
                ),
                window,
            )
            first = (chunk.keep_from - chunk.start) * rows_per_frame + (0 if index == 0 else half_rows)
            last = (chunk.keep_to - chunk.start) * rows_per_frame + (
                2 * half_rows if index == len(plan) - 1 else half_rows
            )
            pieces.append(out[:, :, first:last])
            self.last_plan.append((chunk.size, chunk.start))
        return interleave(np.concatenate(pieces, axis=2))

    @staticmethod
    def _checked(out: np.ndarray, polyphase: np.ndarray) -> np.ndarray:
        out = np.asarray(out, dtype=np.float32)
        if out.shape != polyphase.shape:
            raise RuntimeError(f"the decoder graph returned shape {out.shape}, expected {polyphase.shape}")
        if not np.isfinite(out).all():
            raise FloatingPointError("the decoder graph returned non-finite samples")
        return out


def default_source_noise(config: HiFTConfig) -> SourceNoise:
    """The noise ``HiFT`` uses when none is given: CosyVoice3's fixed buffer, CosyVoice2 seeded Gaussian."""
    if config.causal:
        return FixedUniformSourceNoise()
    return GaussianSourceNoise(harmonics=config.nb_harmonics + 1)


def torch_split_vocoder(hift: HiFT, *, chunk_frames: int | None = None) -> SplitVocoder:
    """The split design run by the torch rewrite graphs (float32 CPU): same numbers as the Core ML path.

    ``chunk_frames`` decodes in fixed-size chunks with context (as the Neural Engine path does).
    """
    f0_graph, decoder_graph = build_graphs(hift)

    @torch.inference_mode()
    def f0(mel: np.ndarray) -> np.ndarray:
        return f0_graph(torch.from_numpy(mel)).numpy()

    @torch.inference_mode()
    def decode(mel: np.ndarray, polyphase: np.ndarray) -> np.ndarray:
        return decoder_graph(torch.from_numpy(mel), torch.from_numpy(polyphase)).numpy()

    if chunk_frames:
        return SplitVocoder(
            hift.config,
            HostSource.from_hift(hift),
            f0,
            flexible=Decoder(decode),
            chunked=Decoder(decode, frames=chunk_frames),
            name="torch-split-chunked",
        )
    return SplitVocoder(hift.config, HostSource.from_hift(hift), f0, flexible=Decoder(decode), name="torch-split")
