"""Bounded-window decoding of HiFT: no convolution sees a time axis longer than a given limit.

MPS convolutions before macOS 15.1 refuse any output dimension (and any transposed-conv input
dimension) above 65536, and HiFT's full-rate convolutions run over ``120 T + 1`` STFT frames, so one
call over more than ~546 mel frames (10.9 s) fails there. The decoder is a finite stack of
convolutions: output frame ``t`` depends only on mel frames ``[t - left, t + right]`` and on the
source, which is computed once for the whole call (phase and noise are global). Decoding windows
with ``left``/``right`` frames of context and keeping only their middles therefore gives the one-shot
output to float rounding, for the causal CosyVoice3 vocoder and the non-causal CosyVoice2 one alike;
no cross-fade is involved. :func:`context_frames` derives the context from the modules themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from .layers import CausalUpsample, PaddedConv1d, ResBlock

SAFETY_FRAMES = 1  # rounding of the per-layer extents to whole frames


def _conv_extent(conv: nn.Conv1d, rate: float) -> tuple[float, float]:
    """(left, right) reach of one conv in mel frames; ``rate`` = its input samples per mel frame."""
    span = conv.dilation[0] * (conv.kernel_size[0] - 1)
    left = conv.pad_left if isinstance(conv, PaddedConv1d) else conv.padding[0]
    return left / rate, (span - left) / rate


def _resblock_extent(block: ResBlock, rate: float) -> tuple[float, float]:
    left = right = 0.0
    for conv in (*block.convs1, *block.convs2):
        conv_left, conv_right = _conv_extent(conv, rate)
        left, right = left + conv_left, right + conv_right
    return left, right


def _upsample_extent(up: nn.Module, rate_in: float) -> tuple[float, float]:
    """Reach of an upsampling layer in mel frames (one extra input sample each side for rounding)."""
    kernel, stride = up.kernel_size[0], up.stride[0] if not isinstance(up, CausalUpsample) else up.upsample_rate
    if isinstance(up, CausalUpsample):
        return ((kernel - 1) / stride + 1) / rate_in, 1 / rate_in
    padding = up.padding[0]
    return ((kernel - 1 - padding) / stride + 1) / rate_in, (padding / stride + 1) / rate_in


def context_frames(hift) -> tuple[int, int]:
    """Mel frames of context a window needs on its (left, right) for exact output: an upper bound.

    Sums every layer's reach in mel frames along the decoder (conv_pre, each upsampling, the widest
    parallel ResBlock, the source path of each stage, conv_post) plus the STFT pair's edges. Summing the
    source path instead of taking a maximum over paths over-counts a little, never under-counts.
    """
    config = hift.config
    stft_rate = math.prod(config.upsample_rates)  # STFT frames per mel frame (120)
    left, right = _conv_extent(hift.conv_pre, 1)
    rate = 1.0
    kernels = len(config.resblock_kernel_sizes)
    for i, up in enumerate(hift.ups):
        up_left, up_right = _upsample_extent(up, rate)
        rate *= config.upsample_rates[i]
        blocks = [_resblock_extent(hift.resblocks[i * kernels + j], rate) for j in range(kernels)]
        down_left, down_right = _conv_extent(hift.source_downs[i], stft_rate)
        source_left, source_right = _resblock_extent(hift.source_resblocks[i], rate)
        left += up_left + max(b[0] for b in blocks) + down_left + source_left
        right += up_right + max(b[1] for b in blocks) + down_right + source_right
    post_left, post_right = _conv_extent(hift.conv_post, stft_rate)
    # The STFT reflects n_fft/2 samples at a window's edges; the iSTFT overlap-adds n_fft samples.
    edges = 2 * config.n_fft / (config.hop_len * stft_rate)
    return (math.ceil(left + post_left + edges) + SAFETY_FRAMES, math.ceil(right + post_right + edges) + SAFETY_FRAMES)


@dataclass(frozen=True)
class Window:
    """Decode mel frames ``[start, stop)`` and keep output frames ``[keep_start, keep_stop)`` (absolute)."""

    start: int
    stop: int
    keep_start: int
    keep_stop: int


def plan_windows(frames: int, output_frames: int, first_frame: int, limit: int | None, hift) -> list[Window]:
    """Windows covering output frames ``[first_frame, output_frames)`` of a decode over ``frames`` mel frames.

    ``output_frames`` is ``frames`` except for a causal ``finalize=False`` call (fewer: its last frames
    are look-ahead). A window of ``W`` frames runs convs over ``stft_rate * W + 1`` STFT frames, the
    longest time axis in the decoder, so each window keeps that within ``limit`` (None: one window).
    """
    left, right = context_frames(hift)
    stft_rate = math.prod(hift.config.upsample_rates)
    start = max(0, first_frame - left)
    if limit is None or stft_rate * (frames - start) + 1 <= limit:
        return [Window(start, frames, first_frame, output_frames)]
    right = max(right, frames - output_frames)
    step = (limit - 1) // stft_rate - left - right
    if step < 1:
        raise ValueError(f"a conv limit of {limit} samples leaves no room for {left}+{right} frames of context")
    windows, keep = [], first_frame
    while keep < output_frames:
        keep_stop = min(output_frames, keep + step)
        stop = frames if keep_stop == output_frames else min(frames, keep_stop + right)
        windows.append(Window(max(0, keep - left), stop, keep, keep_stop))
        keep = keep_stop
    return windows
