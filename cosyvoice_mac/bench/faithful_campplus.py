"""The CAM++ speaker encoder's architecture (``campplus.onnx``) in torch, for RANDOM-weight graphs.

Written from 3D-Speaker's definition (``speakerlab/models/campplus``: ``DTDNN.py``, ``layers.py``) at the sizes
CosyVoice's file has (``CAMPPlus(feat_dim=80, embedding_size=192)``, its ``campplus_cn_common`` model), so a graph
exported from this module costs what the released one costs:

* input: the mean-normalised 80-bin Kaldi fbank ``(1, T, 80)`` at 100 frames a second;
* the FCM head: a 2-D convolution stem of 32 channels and two stages of two residual blocks, each stage and a last
  convolution halving the frequency axis (80 -> 10), read as 320 channels over time;
* a 5-tap TDNN of stride 2 (50 frames a second) to 128 channels, then three dense CAM-TDNN blocks (12, 24 and 16
  layers, growth 32, bottleneck 128, 3 taps, dilation 1, 2, 2), each layer's output gated by its context
  attention mask (the sequence mean plus 100-frame segment means), each block followed by a transition halving its
  channels (512 -> 256, 1024 -> 512, 1024 -> 512);
* statistics pooling (mean and standard deviation over time) and a dense layer to the 192-d embedding.

Batch norms everywhere (folded into the convolutions when exported). Parameters: 6,848,544, the count of
3D-Speaker's ``CAMPPlus(feat_dim=80, embedding_size=192)``. The weights are random: the vector means nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SEGMENT_FRAMES = 100  # the context mask's segment: one second at the TDNN's 50 frames a second (two)


@dataclass(frozen=True)
class CamShape:
    """CAM++'s sizes: the released ones are :data:`CAMPLUS_SHAPE`; tests build small ones."""

    features: int = 80
    embedding: int = 192
    head_channels: int = 32
    tdnn_channels: int = 128
    growth: int = 32
    bottleneck: int = 128  # 4 x growth
    block_layers: tuple[int, ...] = (12, 24, 16)
    block_dilations: tuple[int, ...] = (1, 2, 2)


CAMPLUS_SHAPE = CamShape()
RELEASED_PARAMETERS = 6_848_544  # 3D-Speaker's CAMPPlus(feat_dim=80, embedding_size=192)


def norm_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm1d(channels), nn.ReLU())


class ResidualBlock2d(nn.Module):
    """Two 3x3 convolutions and a shortcut; ``stride`` halves the frequency axis only."""

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=(stride, 1), padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Identity()
        if stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels, channels, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x):
        y = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
        return F.relu(y + self.shortcut(x))


class FrequencyHead(nn.Module):
    """FCM: ``(B, 80, T)`` -> ``(B, 32 * 10, T)``."""

    def __init__(self, shape: CamShape):
        super().__init__()
        width = shape.head_channels
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(*(ResidualBlock2d(width, stride) for stride in (2, 1, 2, 1)))
        self.last = nn.Sequential(
            nn.Conv2d(width, width, 3, stride=(2, 1), padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.out_channels = width * (shape.features // 8)

    def forward(self, x):
        x = self.last(self.stages(self.stem(x.unsqueeze(1))))
        return x.flatten(1, 2)


class ContextGate(nn.Module):
    """The CAM layer: a local 3-tap convolution, gated by a mask from the sequence and segment means."""

    def __init__(self, channels: int, out_channels: int, dilation: int):
        super().__init__()
        self.local = nn.Conv1d(channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False)
        self.squeeze = nn.Conv1d(channels, channels // 2, 1)
        self.expand = nn.Conv1d(channels // 2, out_channels, 1)

    def forward(self, x):
        frames = x.shape[-1]
        segments = F.avg_pool1d(x, SEGMENT_FRAMES, SEGMENT_FRAMES, ceil_mode=True)
        spread = segments.repeat_interleave(SEGMENT_FRAMES, dim=-1)[..., :frames]
        context = x.mean(dim=-1, keepdim=True) + spread
        return self.local(x) * torch.sigmoid(self.expand(F.relu(self.squeeze(context))))


class DenseLayer(nn.Module):
    def __init__(self, channels: int, shape: CamShape, dilation: int):
        super().__init__()
        self.bottleneck = nn.Sequential(
            norm_relu(channels), nn.Conv1d(channels, shape.bottleneck, 1, bias=False), norm_relu(shape.bottleneck)
        )
        self.gate = ContextGate(shape.bottleneck, shape.growth, dilation)

    def forward(self, x):
        return torch.cat([x, self.gate(self.bottleneck(x))], dim=1)


class CamPlusPlus(nn.Module):
    """``(B, T, 80)`` fbank -> ``(B, 192)`` speaker embedding (not normalised)."""

    def __init__(self, shape: CamShape = CAMPLUS_SHAPE):
        super().__init__()
        self.head = FrequencyHead(shape)
        channels = shape.tdnn_channels
        layers: list[nn.Module] = [
            nn.Conv1d(self.head.out_channels, channels, 5, stride=2, padding=2, bias=False),
            norm_relu(channels),
        ]
        for count, dilation in zip(shape.block_layers, shape.block_dilations):
            for _ in range(count):
                layers.append(DenseLayer(channels, shape, dilation))
                channels += shape.growth
            layers += [norm_relu(channels), nn.Conv1d(channels, channels // 2, 1, bias=False)]  # the transition
            channels //= 2
        layers.append(norm_relu(channels))
        self.trunk = nn.Sequential(*layers)
        self.dense = nn.Conv1d(2 * channels, shape.embedding, 1, bias=False)
        self.dense_norm = nn.BatchNorm1d(shape.embedding, affine=False)

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        x = self.trunk(self.head(fbank.transpose(1, 2)))
        return self.dense_norm(self.dense(statistics_pooling(x).unsqueeze(-1))).squeeze(-1)


def statistics_pooling(x: torch.Tensor) -> torch.Tensor:
    """``(B, C, T)`` -> ``(B, 2C)``: the mean and the unbiased standard deviation of each channel over time."""
    mean = x.mean(dim=2, keepdim=True)
    variance = (x - mean).pow(2).sum(dim=2) / (x.shape[2] - 1)
    return torch.cat([mean.squeeze(2), variance.sqrt()], dim=1)
