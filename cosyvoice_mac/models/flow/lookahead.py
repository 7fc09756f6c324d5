"""Pre-look-ahead layer: the only place where a frame of the flow front-end sees future tokens.

CosyVoice3 uses it as its whole token front-end (80 -> 1024 -> 80); the CosyVoice2 conformer
encoder uses the same layer inside (512 -> 512 -> 512). Upstream:
``cosyvoice/transformer/upsample_encoder.py::PreLookaheadLayer``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEAKY_SLOPE = 0.01  # F.leaky_relu default, as upstream
_SECOND_KERNEL = 3


class PreLookaheadLayer(nn.Module):
    """Owns ``conv1`` (k = look-ahead + 1, sees frames t..t+L) and ``conv2`` (causal k = 3), plus the residual.

    Output frame t depends on input frames t-2 .. t+L. At the right edge the future frames are
    either real look-ahead ``context`` (intermediate streaming chunks) or zeros.
    """

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int = 3):
        super().__init__()
        self.in_channels = in_channels
        self.channels = channels
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, kernel_size=pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, kernel_size=_SECOND_KERNEL)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """``x (B, T, C)`` plus optional look-ahead ``context (B, Lc, C)`` with Lc <= look-ahead -> ``(B, T, C)``.

        A shorter (or absent) context is padded with zero frames on the right.
        """
        frames = x.transpose(1, 2)
        lookahead = self.pre_lookahead_len
        if context is not None and context.shape[1] > 0:
            if context.shape[1] > lookahead:
                raise ValueError(
                    f"look-ahead context has {context.shape[1]} frames; this layer looks ahead at most {lookahead}"
                )
            frames = torch.cat([frames, context.transpose(1, 2).to(frames.dtype)], dim=2)
            lookahead -= context.shape[1]
        out = F.leaky_relu(self.conv1(F.pad(frames, (0, lookahead))), _LEAKY_SLOPE)
        out = self.conv2(F.pad(out, (_SECOND_KERNEL - 1, 0)))
        return out.transpose(1, 2) + x
