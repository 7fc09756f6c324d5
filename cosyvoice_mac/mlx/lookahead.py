"""The pre-look-ahead layer in MLX (mirrors ``models.flow.lookahead``): where a flow frame sees future tokens.

CosyVoice3's whole token front end, and the first layer inside CosyVoice2's conformer encoder.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from cosyvoice_mac.models.flow.lookahead import _LEAKY_SLOPE, _SECOND_KERNEL


class PreLookaheadLayer(nn.Module):
    """Owns ``conv1`` (k = look-ahead + 1) and causal ``conv2`` (k 3) plus the residual, ``(B, T, C)``."""

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int):
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, _SECOND_KERNEL)

    def __call__(self, x: mx.array, context: mx.array | None = None) -> mx.array:
        """``x (B, T, C)`` plus look-ahead ``context (B, Lc, C)`` (Lc <= look-ahead, zeros fill the rest)."""
        frames, lookahead = x, self.pre_lookahead_len
        if context is not None and context.shape[1] > 0:
            frames = mx.concatenate([frames, context], axis=1)
            lookahead -= context.shape[1]
        out = nn.leaky_relu(self.conv1(mx.pad(frames, [(0, 0), (0, lookahead), (0, 0)])), _LEAKY_SLOPE)
        return self.conv2(mx.pad(out, [(0, 0), (_SECOND_KERNEL - 1, 0), (0, 0)])) + x
