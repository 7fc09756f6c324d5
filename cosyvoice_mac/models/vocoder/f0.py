"""F0 (pitch) predictors of HiFT: mel frames -> fundamental frequency in Hz per frame.

CosyVoice2 ``ConvRNNF0Predictor``: five ``Conv1d(k3, same padding) -> ELU`` layers, ``Linear -> abs``.
CosyVoice3 ``CausalConvRNNF0Predictor``: the first conv is k4 with 3 look-ahead frames (right padding),
the other four are causal k3 (left padding). Upstream runs the causal predictor in float64 because the
source phase integrates f0 and streaming consistency depends on it; we do the same on the CPU and
use float32 on any other device (MPS has no float64).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .layers import PaddedConv1d, causal_padding

NUM_LAYERS = 5


class F0Predictor(nn.Module):
    """Owns the f0 network (``condnet`` convs + ``classifier``); keys as upstream's ``f0_predictor.*``."""

    def __init__(self, in_channels: int = 80, cond_channels: int = 512, *, causal: bool, num_class: int = 1):
        super().__init__()
        self.causal = causal
        layers: list[nn.Module] = []
        for index in range(NUM_LAYERS):
            channels_in = in_channels if index == 0 else cond_channels
            kernel_size = 4 if causal and index == 0 else 3
            if not causal:
                padding = (1, 1)
            elif index == 0:
                padding = (0, causal_padding(kernel_size))  # look-ahead frames on the right
            else:
                padding = (causal_padding(kernel_size), 0)
            layers += [PaddedConv1d(channels_in, cond_channels, kernel_size, padding=padding), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    @property
    def lookahead(self) -> int:
        """Mel frames the causal predictor reads past the frame it predicts (0 when non-causal)."""
        first: PaddedConv1d = self.condnet[0]
        return first.pad_right if self.causal else 0

    def forward(self, mel: torch.Tensor, *, finalize: bool = True) -> torch.Tensor:
        """``(B, C_mel, T) -> (B, T')`` f0 in Hz, float32 on the module's device.

        ``T' = T`` when finalizing; a causal predictor with ``finalize=False`` uses its last
        ``lookahead`` input frames as look-ahead only, so ``T' = T - lookahead``.
        """
        dtype = self.compute_dtype(mel.device)
        return self._predict(mel.to(dtype), finalize).to(mel.dtype)

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        """float64 for the causal predictor on the CPU (as upstream), float32 otherwise (MPS has no float64)."""
        if self.causal and device.type == "cpu":
            return torch.float64  # cpu-only: upstream runs this predictor in float64 (streaming consistency)
        return torch.float32

    def _predict(self, x: torch.Tensor, finalize: bool) -> torch.Tensor:
        dtype = x.dtype  # float64 only where compute_dtype() allows it; otherwise the casts are no-ops
        real_lookahead = self.causal and not finalize
        for index, layer in enumerate(self.condnet):
            if isinstance(layer, PaddedConv1d):
                weight, bias = layer.weight.to(dtype), layer.bias.to(dtype)
                x = layer.forward_with(x, weight, bias, pad_right=index > 0 or not real_lookahead)
            else:
                x = layer(x)
        logits = F.linear(x.transpose(1, 2), self.classifier.weight.to(dtype), self.classifier.bias.to(dtype))
        return logits.squeeze(-1).abs()
