"""The CosyVoice3 DiT velocity estimator in MLX (mirrors ``cosyvoice_mac.models.flow.dit``).

Layout is ``(B, T, C)`` throughout (MLX convolutions are channels-last); the public call takes and
returns the PyTorch model's ``(B, 80, T)``. Only fully valid frames are supported (the flow never pads):
the mask is chunk-causal when streaming and absent otherwise. With a :class:`PrefixStep` the call either
records the layer tensors of a prompt prefix or computes the frames that follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from cosyvoice_mac.models.flow.dit import (
    CONV_POS_GROUPS,
    CONV_POS_KERNEL,
    NORM_EPS,
    TIME_FREQ_DIM,
    TIME_SCALE,
    DiTConfig,
)
from cosyvoice_mac.models.flow.masks import chunk_causal_mask

# decoder.estimator.* names of flow.pt -> the modules below
KEY_MAP = (
    (r"\.conv_pos_embed\.conv(\d)\.0\.", r".conv_pos_embed.conv\1."),
    (r"\.attn\.to_out\.0\.", ".attn.to_out."),
    (r"\.ff\.ff\.0\.0\.", ".ff.up."),
    (r"\.ff\.ff\.2\.", ".ff.down."),
    (r"\.time_mlp\.0\.", ".time_mlp.first."),
    (r"\.time_mlp\.2\.", ".time_mlp.second."),
)


@dataclass
class PrefixStep:
    """Owns one Euler step's tensors over a cached prompt prefix, keyed by layer name: attention keys and
    values ``(B, H, Tp, d)`` and each causal convolution's last input frames ``(B, k - 1, C)``.
    While ``recording`` the layers store them; afterwards they read them (see ``models.flow.prefix``).
    ``keep`` (recording only): record the prefix of the call's first ``keep`` frames (a new voice's first
    streamed chunk records its prefix on the way, as ``models.flow.prefix.StepState`` does)."""

    frames: int = 0
    recording: bool = True
    tensors: dict[str, mx.array] = field(default_factory=dict)
    keep: int | None = None

    def keys_and_values(self, name: str, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.recording:
            kept = (keys, values)
            if self.keep is not None:  # copies, so the call's later frames are freed
                kept = tuple(mx.contiguous(z[:, :, : self.keep]) for z in kept)
            self.tensors[name + ".k"], self.tensors[name + ".v"] = kept
            return keys, values
        return (
            mx.concatenate([self.tensors[name + ".k"], keys], axis=2),
            mx.concatenate([self.tensors[name + ".v"], values], axis=2),
        )

    def left_padded(self, name: str, x: mx.array, frames: int) -> mx.array:
        """``x (B, T, C)`` with ``frames`` frames of left context: zeros at the start, else the prefix's."""
        if self.recording:
            padded = mx.pad(x, [(0, 0), (frames, 0), (0, 0)])
            end = padded.shape[1] - frames if self.keep is None else self.keep  # the context of frame `end`
            window = padded[:, end : end + frames]
            self.tensors[name + ".tail"] = window if self.keep is None else mx.contiguous(window)  # frees the rest
            return padded
        return mx.concatenate([self.tensors[name + ".tail"], x], axis=1)

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def _mish(x: mx.array) -> mx.array:
    return x * mx.tanh(mx.logaddexp(x, mx.zeros_like(x)))


def _norm(x: mx.array) -> mx.array:
    return mx.fast.layer_norm(x, None, None, NORM_EPS)


class TimeMLP(nn.Module):
    """Owns ``time_mlp``: sinusoid(1000 t) of width 256 -> Linear -> SiLU -> Linear. ``t (B,) -> (B, D)``."""

    def __init__(self, dim: int):
        super().__init__()
        self.first = nn.Linear(TIME_FREQ_DIM, dim)
        self.second = nn.Linear(dim, dim)

    def __call__(self, t: mx.array) -> mx.array:
        half = TIME_FREQ_DIM // 2
        freqs = mx.exp(mx.arange(half).astype(mx.float32) * -(math.log(10000) / (half - 1)))
        angles = TIME_SCALE * t.astype(mx.float32)[:, None] * freqs[None, :]
        sinusoid = mx.concatenate([mx.sin(angles), mx.cos(angles)], axis=-1)
        return self.second(nn.silu(self.first(sinusoid.astype(self.first.weight.dtype))))


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.time_mlp = TimeMLP(dim)

    def __call__(self, t: mx.array) -> mx.array:
        return self.time_mlp(t)


class GroupedCausalConv(nn.Module):
    """Owns one grouped causal Conv1d (k 31, 16 groups) of the position embedding, ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, dim: int, name: str):
        super().__init__()
        self.weight = mx.zeros((dim, CONV_POS_KERNEL, dim // CONV_POS_GROUPS))
        self.bias = mx.zeros((dim,))
        self.name = name

    def __call__(self, x: mx.array, state: PrefixStep | None) -> mx.array:
        pad = CONV_POS_KERNEL - 1
        x = mx.pad(x, [(0, 0), (pad, 0), (0, 0)]) if state is None else state.left_padded(self.name, x, pad)
        return _mish(mx.conv1d(x, self.weight, groups=CONV_POS_GROUPS) + self.bias)


class CausalConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.conv1 = GroupedCausalConv(dim, "pos1")
        self.conv2 = GroupedCausalConv(dim, "pos2")

    def __call__(self, x: mx.array, state: PrefixStep | None) -> mx.array:
        return self.conv2(self.conv1(x, state), state)


class InputEmbedding(nn.Module):
    """Owns ``proj`` ([x, cond, mu, spks] -> D) and the convolutional position embedding."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.proj = nn.Linear(config.mel_dim * 2 + config.mu_dim + config.spk_dim, config.dim)
        self.spk_dim = config.spk_dim
        self.conv_pos_embed = CausalConvPositionEmbedding(config.dim)

    def __call__(self, x, cond, mu, spks, state: PrefixStep | None) -> mx.array:
        """``x, cond, mu (B, T, 80)``, ``spks (B, S)`` -> ``(B, T, D)``."""
        parts = [x, cond, mu]
        if self.spk_dim > 0:
            parts.append(mx.broadcast_to(spks[:, None, :], (x.shape[0], x.shape[1], spks.shape[-1])))
        h = self.proj(mx.concatenate(parts, axis=-1))
        return self.conv_pos_embed(h, state) + h


def rotate_pairs(x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
    """Rotate channel pairs (2i, 2i+1) of ``x (B, T, C)`` by ``cos/sin (T, R)``; channels >= R pass through."""
    width = cos.shape[-1]
    head = x[..., :width]
    pairs = head.reshape(*head.shape[:-1], width // 2, 2)
    rotated_half = mx.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(head.shape)
    return mx.concatenate([head * cos + rotated_half * sin, x[..., width:]], axis=-1)


class Attention(nn.Module):
    """Owns q/k/v/out projections (with bias); RoPE on the projections before the head split (head 0 only)."""

    def __init__(self, dim: int, heads: int, dim_head: int, name: str):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head, self.name = heads, dim_head, name
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.to_out = nn.Linear(inner, dim)

    def __call__(self, x: mx.array, rope: tuple[mx.array, mx.array], mask, state: PrefixStep | None) -> mx.array:
        batch, length, _ = x.shape
        split = lambda z: z.reshape(batch, length, self.heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
        q = split(rotate_pairs(self.to_q(x), *rope))
        k = split(rotate_pairs(self.to_k(x), *rope))
        v = split(self.to_v(x))
        if state is not None:
            k, v = state.keys_and_values(self.name, k, v)
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.dim_head**-0.5, mask=mask)
        return self.to_out(out.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class FeedForward(nn.Module):
    """Owns Linear(D, mult D) -> tanh-GELU -> Linear(mult D, D)."""

    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.up = nn.Linear(dim, dim * mult)
        self.down = nn.Linear(dim * mult, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down(nn.gelu_approx(self.up(x)))


class AdaLayerNormZero(nn.Module):
    """Owns ``linear``: SiLU(temb) -> ``chunks`` modulation vectors ``(B, 1, D)``."""

    def __init__(self, dim: int, chunks: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * chunks)
        self.chunks = chunks

    def modulation(self, temb: mx.array) -> list[mx.array]:
        return [c[:, None, :] for c in mx.split(self.linear(nn.silu(temb)), self.chunks, axis=1)]


class DiTBlock(nn.Module):
    """One pre-norm transformer block with adaLN-zero time modulation of both sub-layers."""

    def __init__(self, config: DiTConfig, index: int):
        super().__init__()
        self.attn_norm = AdaLayerNormZero(config.dim, 6)
        self.attn = Attention(config.dim, config.heads, config.dim_head, f"block{index}")
        self.ff = FeedForward(config.dim, config.ff_mult)

    def __call__(self, x, temb, rope, mask, state: PrefixStep | None) -> mx.array:
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.attn_norm.modulation(temb)
        x = x + gate_a * self.attn(shift_a + _norm(x) * (1 + scale_a), rope, mask, state)
        return x + gate_f * self.ff(shift_f + _norm(x) * (1 + scale_f))


class RotaryEmbedding(nn.Module):
    """Owns ``inv_freq`` (a checkpoint buffer, kept float32); interleaved pairs over one head width."""

    def __init__(self, dim_head: int):
        super().__init__()
        self.inv_freq = mx.zeros((dim_head // 2,))

    def cos_sin(self, length: int, start: int) -> tuple[mx.array, mx.array]:
        """``(T, R)`` cos and sin of ``p * inv_freq[i]`` laid out [a0, a0, a1, a1, ...]."""
        positions = mx.arange(start, start + length).astype(mx.float32)
        angles = mx.repeat(positions[:, None] * self.inv_freq.astype(mx.float32)[None, :], 2, axis=-1)
        return mx.cos(angles), mx.sin(angles)


class DiT(nn.Module):
    """The v3 velocity estimator: time/input embeddings, RoPE, ``depth`` blocks, final adaLN + projection."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.config = config
        self.time_embed = TimestepEmbedding(config.dim)
        self.input_embed = InputEmbedding(config)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        self.transformer_blocks = [DiTBlock(config, i) for i in range(config.depth)]
        self.norm_out = AdaLayerNormZero(config.dim, 2)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def attention_mask(self, length: int, streaming: bool, prefix_frames: int) -> mx.array | None:
        """Chunk-causal ``(T, Tp + T)`` bool when streaming (rows are the new frames), else None."""
        if not streaming or self.config.static_chunk_size <= 0:
            return None
        allowed = chunk_causal_mask(prefix_frames + length, self.config.static_chunk_size, "cpu")[prefix_frames:]
        allowed = allowed.numpy()
        return None if prefix_frames and allowed.all() else mx.array(np.ascontiguousarray(allowed))

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
        dtype = self.proj_out.weight.dtype
        x, mu, cond, spks = (z.astype(dtype) for z in (x, mu, cond, spks))
        prefix_frames = 0 if state is None or state.recording else state.frames
        temb = self.time_embed(t)
        h = self.input_embed(x, cond, mu, spks, state)
        cos, sin = self.rotary_embed.cos_sin(h.shape[1], prefix_frames)
        rope = (cos.astype(dtype), sin.astype(dtype))
        mask = self.attention_mask(h.shape[1], streaming, prefix_frames)
        for block in self.transformer_blocks:
            h = block(h, temb, rope, mask, state)
        scale, shift = self.norm_out.modulation(temb)
        return self.proj_out(_norm(h) * (1 + scale) + shift)
