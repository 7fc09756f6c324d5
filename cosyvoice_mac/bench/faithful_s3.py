"""The S3 speech tokenizer's architecture (v2 of CosyVoice2, v3 of CosyVoice3) in torch, for RANDOM-weight graphs.

Written from the ``s3tokenizer`` package's model definitions (0.3.0: ``model_v2.py``, ``model_v3.py``), which
load the released ``speech_tokenizer_v2.onnx`` / ``speech_tokenizer_v3.onnx`` weights, so a graph exported from
this module costs what the released one costs:

* input: the whisper log-mel ``(1, 128, T)`` at 100 frames a second and its length;
* a stem of two 3-tap convolutions of stride 2 with GELU (``T`` -> ``ceil(T / 4)``: 25 frames a second), 1280 wide;
* 6 (v2) or 12 (v3) pre-norm transformer blocks: 20 heads of 64 with rotary positions, scaled by
  ``head ** -0.25`` on both sides, a padding bias, and an FSMN memory (a 31-tap depthwise convolution over the
  values, added to the attention's output); a 4x GELU MLP;
* the FSQ quantiser: a 1280 -> 8 projection, ``tanh``, rounded to {-1, 0, 1}, read as 8 base-3 digits
  (6561 codes).

Parameters: v2 123,714,568 and v3 242,009,608, the counts of the package's ``S3TokenizerV2`` /
``S3TokenizerV3`` (the key projection has no bias). The weights here are random: the tokens mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

ROTARY_THETA = 10000.0
ROTARY_POSITIONS = 2048  # the package's table: 2048 encoder frames (82 s), more than the 30 s limit needs
MASKED = -1.0e10  # the package's padding bias
FSQ_SCALE = 0.999  # keeps tanh's output below 1 so that rounding never reaches 2


@dataclass(frozen=True)
class S3Shape:
    """One tokenizer's sizes: the released ones are :data:`S3_SHAPES`; tests build small ones."""

    layers: int
    width: int = 1280
    heads: int = 20
    mels: int = 128
    fsmn_taps: int = 31
    fsq_digits: int = 8  # of base 3: 3 ** 8 = 6561 codes
    key_bias: bool = False

    @property
    def codes(self) -> int:
        return 3**self.fsq_digits


S3_SHAPES = {"cosyvoice2": S3Shape(layers=6), "cosyvoice3": S3Shape(layers=12)}
RELEASED_PARAMETERS = {"cosyvoice2": 123_714_568, "cosyvoice3": 242_009_608}  # s3tokenizer 0.3.0's modules


def frames_after_stride(length: torch.Tensor) -> torch.Tensor:
    """Frames out of a 3-tap, stride-2, padding-1 convolution."""
    return (length - 1) // 2 + 1


def frame_mask(length: torch.Tensor, frames: int) -> torch.Tensor:
    """``(B, frames)`` float: 1 on each sequence's real frames, 0 on its padding."""
    return (torch.arange(frames, device=length.device).unsqueeze(0) < length.unsqueeze(1)).float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class FsmnAttention(nn.Module):
    """Self-attention with rotary positions and the FSMN memory over its values."""

    def __init__(self, shape: S3Shape):
        super().__init__()
        self.heads = shape.heads
        self.query = nn.Linear(shape.width, shape.width)
        self.key = nn.Linear(shape.width, shape.width, bias=shape.key_bias)
        self.value = nn.Linear(shape.width, shape.width)
        self.out = nn.Linear(shape.width, shape.width)
        self.memory = nn.Conv1d(
            shape.width, shape.width, shape.fsmn_taps, padding=shape.fsmn_taps // 2, groups=shape.width, bias=False
        )

    def forward(self, x, bias, keep, cos, sin):
        batch, frames, width = x.shape
        head = width // self.heads
        split = (batch, frames, self.heads, head)
        q, k, v = self.query(x).view(split), self.key(x).view(split), self.value(x).view(split)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        values = v.reshape(batch, frames, width) * keep
        memory = (self.memory(values.transpose(1, 2)).transpose(1, 2) + values) * keep
        scale = head**-0.25
        scores = (q.transpose(1, 2) * scale) @ (k.permute(0, 2, 3, 1) * scale) + bias
        mixed = torch.softmax(scores, dim=-1) @ v.transpose(1, 2)
        return self.out(mixed.transpose(1, 2).reshape(batch, frames, width)) + memory


class S3Block(nn.Module):
    def __init__(self, shape: S3Shape):
        super().__init__()
        self.attention_norm = nn.LayerNorm(shape.width)
        self.attention = FsmnAttention(shape)
        self.mlp_norm = nn.LayerNorm(shape.width)
        wide = 4 * shape.width
        self.mlp = nn.Sequential(nn.Linear(shape.width, wide), nn.GELU(), nn.Linear(wide, shape.width))

    def forward(self, x, bias, keep, cos, sin):
        x = x + self.attention(self.attention_norm(x), bias, keep, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class S3Tokenizer(nn.Module):
    """``(B, 128, T)`` log-mel and ``(B,)`` lengths -> ``(B, ceil(T / 4))`` int32 codes in ``[0, 3 ** 8)``."""

    def __init__(self, shape: S3Shape):
        super().__init__()
        self.shape = shape
        self.stem1 = nn.Conv1d(shape.mels, shape.width, 3, stride=2, padding=1)
        self.stem2 = nn.Conv1d(shape.width, shape.width, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(S3Block(shape) for _ in range(shape.layers))
        self.project_down = nn.Linear(shape.width, shape.fsq_digits)
        head = shape.width // shape.heads
        # Tables made on the CPU whatever the default device: under ``torch.device("meta")`` (counting parameters
        # without memory) these few ops would cost seconds of meta kernels' first use.
        cpu = torch.device("cpu")
        rates = ROTARY_THETA ** -(torch.arange(0, head, 2, device=cpu).float() / head)
        positions = torch.arange(ROTARY_POSITIONS, device=cpu).float()
        angles = torch.outer(positions, rates).repeat(1, 2)  # (positions, head)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        digit_values = 3 ** torch.arange(shape.fsq_digits, device=cpu).float()
        self.register_buffer("digit_values", digit_values, persistent=False)

    def forward(self, mel: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        length = length.long()
        x = F.gelu(self.stem1(mel * frame_mask(length, mel.shape[2]).unsqueeze(1)))
        length = frames_after_stride(length)
        x = F.gelu(self.stem2(x * frame_mask(length, x.shape[2]).unsqueeze(1)))
        length = frames_after_stride(length)
        x = x.transpose(1, 2)  # (B, frames, width)
        keep = frame_mask(length, x.shape[1])
        bias = ((1.0 - keep) * MASKED)[:, None, None, :]  # (B, 1, 1, frames): no frame attends to padding
        keep = keep.unsqueeze(2)
        cos, sin = self.cos[: x.shape[1]][None, :, None, :], self.sin[: x.shape[1]][None, :, None, :]
        for block in self.blocks:
            x = block(x, bias, keep, cos, sin)
        return self.quantise(x)

    def quantise(self, x: torch.Tensor) -> torch.Tensor:
        """FSQ: each frame's 8 projected values, squashed and rounded to {-1, 0, 1}, read as base-3 digits."""
        digits = torch.round(torch.tanh(self.project_down(x)) * FSQ_SCALE) + 1.0
        return (digits * self.digit_values).sum(dim=-1).to(torch.int32)


def parameter_count(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())
