"""The CosyVoice2 token encoder in MLX: ``UpsampleConformerEncoder`` (mirrors ``models.flow.conformer``).

Linear embed -> pre-look-ahead conv -> N Conformer layers -> nearest x2 upsample + causal conv -> second
linear embed -> 4 Conformer layers -> LayerNorm, all ``(B, T, C)``. Attention is Transformer-XL style with
ESPnet's relative positions (the table is the PyTorch module's own function); when streaming it is
chunk-causal (``static_chunk_size`` tokens, twice that many frames after upsampling), so the frames of
finished chunks do not change when more tokens arrive.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

from cosyvoice_mac.mlx.lookahead import PreLookaheadLayer
from cosyvoice_mac.models.flow.conformer import (
    EMBED_NORM_EPS,
    LAYER_NORM_EPS,
    ConformerConfig,
    relative_position_encoding,
)
from cosyvoice_mac.models.flow.masks import chunk_causal_mask

# encoder.* names of flow.pt -> the modules below
KEY_MAP = (
    (r"^encoder\.(embed|up_embed)\.out\.0\.", r"encoder.\1.linear."),
    (r"^encoder\.(embed|up_embed)\.out\.1\.", r"encoder.\1.norm."),
)


def relative_shift(scores: mx.array) -> mx.array:
    """``(B, H, T, 2T-1)`` scores against offsets ``T-1..-(T-1)`` -> ``(B, H, T, T)``:
    ``out[i, j] = in[i, T-1-i+j]`` (the PyTorch module's pad-and-reshape, no gather)."""
    batch, heads, length, width = scores.shape
    padded = mx.pad(scores, [(0, 0), (0, 0), (0, 0), (1, 0)]).reshape(batch, heads, width + 1, length)
    return padded[:, :, 1:].reshape(batch, heads, length, width)[..., :length]


class LinearEmbedding(nn.Module):
    """Owns ``linear`` and ``norm`` (LayerNorm); scales by sqrt(d). ``(B, T, C_in) -> (B, T, D)``."""

    def __init__(self, input_size: int, output_size: int):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.norm = nn.LayerNorm(output_size, eps=EMBED_NORM_EPS)
        self.scale = math.sqrt(output_size)

    def __call__(self, x: mx.array) -> mx.array:
        return self.norm(self.linear(x)) * self.scale


class RelPositionAttention(nn.Module):
    """Owns q/k/v/out/pos projections and the per-head biases ``pos_bias_u``/``pos_bias_v`` ``(H, d_k)``.

    ``score(i, j) = [(q_i + u)·k_j + (q_i + v)·W_pos p_(i-j)] / sqrt(d_k)``.
    """

    def __init__(self, size: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, size // heads
        self.linear_q = nn.Linear(size, size)
        self.linear_k = nn.Linear(size, size)
        self.linear_v = nn.Linear(size, size)
        self.linear_out = nn.Linear(size, size)
        self.linear_pos = nn.Linear(size, size, bias=False)
        self.pos_bias_u = mx.zeros((heads, self.head_dim))
        self.pos_bias_v = mx.zeros((heads, self.head_dim))

    def __call__(self, x: mx.array, pos: mx.array, mask: mx.array | None) -> mx.array:
        """``x (B, T, D)``, ``pos (1, 2T-1, D)``, bool ``mask (T, T)`` (True = may attend) or None -> ``(B, T, D)``."""
        batch, length, _ = x.shape
        split = lambda z: z.reshape(z.shape[0], -1, self.heads, self.head_dim)  # noqa: E731
        q = split(self.linear_q(x))  # (B, T, H, d_k)
        k = split(self.linear_k(x)).transpose(0, 2, 1, 3)
        v = split(self.linear_v(x)).transpose(0, 2, 1, 3)
        p = split(self.linear_pos(pos)).transpose(0, 2, 1, 3)  # (1, H, 2T-1, d_k)
        content = (q + self.pos_bias_u).transpose(0, 2, 1, 3) @ k.transpose(0, 1, 3, 2)
        position = relative_shift((q + self.pos_bias_v).transpose(0, 2, 1, 3) @ p.transpose(0, 1, 3, 2))
        scores = (content + position) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = mx.where(mask, scores, -mx.inf)
        weights = mx.softmax(scores, axis=-1, precise=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
        return self.linear_out(context)


class FeedForward(nn.Module):
    """Owns ``w_1`` and ``w_2``: Linear -> SiLU -> Linear."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Linear(size, hidden)
        self.w_2 = nn.Linear(hidden, size)

    def __call__(self, x: mx.array) -> mx.array:
        return self.w_2(nn.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Owns ``self_attn``, ``feed_forward``, ``norm_mha``, ``norm_ff``: two pre-norm residual sub-blocks."""

    def __init__(self, size: int, heads: int, hidden: int):
        super().__init__()
        self.self_attn = RelPositionAttention(size, heads)
        self.feed_forward = FeedForward(size, hidden)
        self.norm_mha = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm_ff = nn.LayerNorm(size, eps=LAYER_NORM_EPS)

    def __call__(self, x: mx.array, pos: mx.array, mask: mx.array | None) -> mx.array:
        x = x + self.self_attn(self.norm_mha(x), pos, mask)
        return x + self.feed_forward(self.norm_ff(x))


class Upsample(nn.Module):
    """Owns ``conv`` (k = 2 stride + 1): nearest upsample by ``stride``, then a causal conv.
    ``(B, T, C) -> (B, sT, C)``."""

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, 2 * stride + 1)

    def __call__(self, x: mx.array) -> mx.array:
        x = mx.repeat(x, self.stride, axis=1)
        return self.conv(mx.pad(x, [(0, 0), (2 * self.stride, 0), (0, 0)]))


class UpsampleConformerEncoder(nn.Module):
    """Owns the whole v2 token -> frame encoder (``embed`` ... ``after_norm``); no positional table is stored."""

    def __init__(self, config: ConformerConfig):
        super().__init__()
        self.config = config
        size = config.output_size
        layers = lambda count: [  # noqa: E731
            ConformerLayer(size, config.attention_heads, config.linear_units) for _ in range(count)
        ]
        self.embed = LinearEmbedding(config.input_size, size)
        self.pre_lookahead_layer = PreLookaheadLayer(size, size, config.pre_lookahead_len)
        self.encoders = layers(config.num_blocks)
        self.up_layer = Upsample(size, config.upsample_stride)
        self.up_embed = LinearEmbedding(size, size)
        self.up_encoders = layers(config.num_up_blocks)
        self.after_norm = nn.LayerNorm(size, eps=EMBED_NORM_EPS)

    def _run_layers(self, layers: list[ConformerLayer], x: mx.array, chunk_size: int, streaming: bool) -> mx.array:
        length = x.shape[1]
        table = relative_position_encoding(length, self.config.output_size, torch.device("cpu"), torch.float32)
        pos = mx.array(table.numpy()).astype(x.dtype)
        mask = None
        if streaming and chunk_size > 0:
            mask = mx.array(np.ascontiguousarray(chunk_causal_mask(length, chunk_size, "cpu").numpy()))
        for layer in layers:
            x = layer(x, pos, mask)
        return x

    def __call__(self, x: mx.array, context: mx.array | None = None, streaming: bool = False) -> mx.array:
        """Token embeddings ``x (B, L, C_in)`` (+ look-ahead ``context (B, Lc, C_in)``) -> ``(B, stride L, D)``."""
        chunk = self.config.static_chunk_size
        x = self.embed(x)
        context = self.embed(context) if context is not None and context.shape[1] > 0 else None
        x = self.pre_lookahead_layer(x, context)
        x = self._run_layers(self.encoders, x, chunk, streaming)
        x = self.up_embed(self.up_layer(x))
        x = self._run_layers(self.up_encoders, x, chunk * self.config.upsample_stride, streaming)
        return self.after_norm(x)
