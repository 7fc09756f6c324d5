"""The CosyVoice2 U-Net (Matcha) velocity estimator in MLX (mirrors ``cosyvoice_mac.models.flow.unet``).

Channels-last ``(B, T, C)`` throughout; the call takes and returns ``(B, T, 80)`` like the MLX DiT, so the
same guided Euler sampler (:class:`cosyvoice_mac.mlx.flow.FlowMatching`) drives either estimator. Only
fully valid frames are supported (the flow never pads), so the padding mask of the PyTorch module is all
ones and left out: attention is chunk-causal when streaming and unmasked otherwise. Every convolution is
causal, so with a :class:`~cosyvoice_mac.mlx.dit.PrefixStep` the call records a prompt prefix (attention
keys/values, each causal conv's last input frames) or computes only the frames after one.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from cosyvoice_mac.mlx.dit import PrefixStep, _mish
from cosyvoice_mac.models.flow.masks import chunk_causal_mask, new_rows_see_every_key
from cosyvoice_mac.models.flow.unet import FF_MULT, TIME_EMBED_MULT, TIME_SCALE, UNetConfig

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, as upstream

# decoder.estimator.* names of flow.pt -> the modules below (applied in order, each at most once per key)
KEY_MAP = (
    (r"^decoder\.estimator\.(down|mid|up)_blocks\.(\d+)\.0\.", r"decoder.estimator.\1_blocks.\2.resnet."),
    (r"^decoder\.estimator\.(down|mid|up)_blocks\.(\d+)\.1\.", r"decoder.estimator.\1_blocks.\2.transformers."),
    (r"^decoder\.estimator\.(down|mid|up)_blocks\.(\d+)\.2\.", r"decoder.estimator.\1_blocks.\2.conv."),
    (r"^(decoder\.estimator\..*)\.block\.0\.", r"\1.conv."),
    (r"^(decoder\.estimator\..*)\.block\.2\.", r"\1.norm."),
    (r"^(decoder\.estimator\..*)\.mlp\.1\.", r"\1.mlp."),
    (r"^(decoder\.estimator\..*)\.to_out\.0\.", r"\1.to_out."),
    (r"^(decoder\.estimator\..*)\.ff\.net\.0\.proj\.", r"\1.ff.proj."),
    (r"^(decoder\.estimator\..*)\.ff\.net\.2\.", r"\1.ff.out."),
)


def time_sinusoid(t: mx.array, dim: int) -> mx.array:
    """``t (B,)`` in [0, 1] -> ``(B, dim)`` float32 ``[sin(1000 t f_k), cos(1000 t f_k)]``,
    ``f_k = 10000^(-k/(dim/2-1))``."""
    half = dim // 2
    frequencies = mx.exp(mx.arange(half).astype(mx.float32) * -(math.log(10000) / (half - 1)))
    angles = TIME_SCALE * t.astype(mx.float32)[:, None] * frequencies[None, :]
    return mx.concatenate([mx.sin(angles), mx.cos(angles)], axis=-1)


class TimestepEmbedding(nn.Module):
    """Owns ``linear_1`` and ``linear_2``: Linear -> SiLU -> Linear. ``(B, C_in) -> (B, 4 channels)``."""

    def __init__(self, in_channels: int, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear_2(nn.silu(self.linear_1(x)))


class CausalConv(nn.Module):
    """Owns one stride-1 Conv1d (MLX layout ``(C_out, k, C_in)``) left-padded by ``k - 1``: ``(B, T, C) -> (B, T, C')``.

    ``name`` keys its left context in a :class:`PrefixStep`.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, name: str):
        super().__init__()
        self.weight = mx.zeros((out_channels, kernel_size, in_channels))
        self.bias = mx.zeros((out_channels,))
        self.name = name

    def __call__(self, x: mx.array, state: PrefixStep | None) -> mx.array:
        pad = self.weight.shape[1] - 1
        x = mx.pad(x, [(0, 0), (pad, 0), (0, 0)]) if state is None else state.left_padded(self.name, x, pad)
        return mx.conv1d(x, self.weight) + self.bias


class CausalBlock(nn.Module):
    """Owns ``conv`` (causal k3) and ``norm`` (LayerNorm over channels): conv -> norm -> Mish."""

    def __init__(self, dim: int, dim_out: int, name: str):
        super().__init__()
        self.conv = CausalConv(dim, dim_out, 3, name)
        self.norm = nn.LayerNorm(dim_out, eps=LAYER_NORM_EPS)

    def __call__(self, x: mx.array, state: PrefixStep | None) -> mx.array:
        return _mish(self.norm(self.conv(x, state)))


class CausalResnet(nn.Module):
    """Owns ``mlp`` (Mish -> Linear of the time embedding), ``block1``, ``block2`` and the 1x1 ``res_conv``."""

    def __init__(self, dim: int, dim_out: int, time_dim: int, name: str):
        super().__init__()
        self.mlp = nn.Linear(time_dim, dim_out)
        self.block1 = CausalBlock(dim, dim_out, name + ".block1")
        self.block2 = CausalBlock(dim_out, dim_out, name + ".block2")
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def __call__(self, x: mx.array, time: mx.array, state: PrefixStep | None) -> mx.array:
        """``x (B, T, C)``, ``time (B, time_dim)`` -> ``(B, T, C')``."""
        h = self.block1(x, state) + self.mlp(_mish(time))[:, None, :]
        return self.block2(h, state) + self.res_conv(x)


class SelfAttention(nn.Module):
    """Owns ``to_q``/``to_k``/``to_v`` (no bias) and ``to_out``; scaled dot-product over ``heads`` heads."""

    def __init__(self, dim: int, heads: int, head_dim: int, name: str):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim, self.name = heads, head_dim, name
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def __call__(self, x: mx.array, mask: mx.array | None, state: PrefixStep | None) -> mx.array:
        batch, length, _ = x.shape
        split = lambda z: z.reshape(batch, length, self.heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
        keys, values = split(self.to_k(x)), split(self.to_v(x))
        if state is not None:
            keys, values = state.keys_and_values(self.name, keys, values)
        out = mx.fast.scaled_dot_product_attention(
            split(self.to_q(x)), keys, values, scale=self.head_dim**-0.5, mask=mask
        )
        return self.to_out(out.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class FeedForward(nn.Module):
    """Owns ``proj`` and ``out``: Linear -> exact (erf) GELU -> Linear."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.proj = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.out(nn.gelu(self.proj(x)))


class TransformerBlock(nn.Module):
    """Owns ``norm1``, ``attn1``, ``norm3``, ``ff``: pre-norm self-attention and feed-forward residuals."""

    def __init__(self, dim: int, heads: int, head_dim: int, name: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.attn1 = SelfAttention(dim, heads, head_dim, name)
        self.norm3 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.ff = FeedForward(dim, FF_MULT * dim)

    def __call__(self, x: mx.array, mask: mx.array | None, state: PrefixStep | None) -> mx.array:
        x = x + self.attn1(self.norm1(x), mask, state)
        return x + self.ff(self.norm3(x))


class Stage(nn.Module):
    """Owns one U-Net level: ``resnet``, ``transformers`` and (down/up blocks) a causal k3 ``conv`` after them."""

    def __init__(self, config: UNetConfig, dim_in: int, with_conv: bool, name: str):
        super().__init__()
        width = config.channels
        self.resnet = CausalResnet(dim_in, width, TIME_EMBED_MULT * width, name + ".resnet")
        self.transformers = [
            TransformerBlock(width, config.num_heads, config.attention_head_dim, f"{name}.attn{i}")
            for i in range(config.n_blocks)
        ]
        if with_conv:
            self.conv = CausalConv(width, width, 3, name + ".conv")

    def blocks(self, x: mx.array, time: mx.array, mask: mx.array | None, state: PrefixStep | None) -> mx.array:
        """Resnet then transformers (the trailing ``conv`` is the caller's: the down block keeps its skip first)."""
        h = self.resnet(x, time, state)
        for block in self.transformers:
            h = block(h, mask, state)
        return h


class CausalConditionalDecoder(nn.Module):
    """The v2 estimator: ``time_mlp``, ``down_blocks``, ``mid_blocks``, ``up_blocks``, ``final_block``,
    ``final_proj``."""

    def __init__(self, config: UNetConfig):
        super().__init__()
        self.config = config
        width = config.channels
        self.time_mlp = TimestepEmbedding(config.in_channels, TIME_EMBED_MULT * width)
        self.down_blocks = [Stage(config, config.in_channels, True, "down0")]
        self.mid_blocks = [Stage(config, width, False, f"mid{i}") for i in range(config.num_mid_blocks)]
        self.up_blocks = [Stage(config, 2 * width, True, "up0")]
        self.final_block = CausalBlock(width, width, "final")
        self.final_proj = nn.Conv1d(width, config.out_channels, 1)

    def attention_mask(self, length: int, streaming: bool, prefix_frames: int) -> mx.array | None:
        """Chunk-causal ``(T, Tp + T)`` bool when streaming (rows are the new frames), else None."""
        chunk = self.config.static_chunk_size
        if not streaming or chunk <= 0 or (prefix_frames and new_rows_see_every_key(prefix_frames, length, chunk)):
            return None
        allowed = chunk_causal_mask(prefix_frames + length, chunk, "cpu")[prefix_frames:].numpy()
        return mx.array(np.ascontiguousarray(allowed))

    def __call__(
        self,
        x: mx.array,
        mu: mx.array,
        t: mx.array,
        spks: mx.array,
        cond: mx.array,
        streaming: bool = False,
        state: PrefixStep | None = None,
    ) -> mx.array:
        """``x, mu, cond (B, T, 80)``, ``t (B,)``, ``spks (B, 80)`` -> velocity ``(B, T, 80)`` (channels last).

        ``state`` (streaming only): record this call as a prefix, or continue after a recorded one.
        """
        dtype = self.final_proj.weight.dtype
        batch, length, _ = x.shape
        speaker = mx.broadcast_to(spks[:, None, :], (batch, length, spks.shape[-1]))
        stacked = mx.concatenate([x, mu, speaker, cond], axis=-1).astype(dtype)
        if stacked.shape[-1] != self.config.in_channels:
            raise ValueError(
                f"x, mu, spks and cond stack to {stacked.shape[-1]} channels; this estimator expects "
                f"{self.config.in_channels}"
            )
        time = self.time_mlp(time_sinusoid(t, self.config.in_channels).astype(dtype))
        prefix_frames = 0 if state is None or state.recording else state.frames
        mask = self.attention_mask(length, streaming, prefix_frames)

        down = self.down_blocks[0]
        skip = down.blocks(stacked, time, mask, state)
        h = down.conv(skip, state)
        for stage in self.mid_blocks:
            h = stage.blocks(h, time, mask, state)
        up = self.up_blocks[0]
        h = up.conv(up.blocks(mx.concatenate([h, skip], axis=-1), time, mask, state), state)
        return self.final_proj(self.final_block(h, state))
