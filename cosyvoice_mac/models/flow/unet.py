"""CosyVoice2 flow estimator: ``CausalConditionalDecoder``, a causal 1-D U-Net with transformer blocks.

Predicts the flow-matching velocity of a noisy mel ``x`` given the token features ``mu``, the
speaker vector and the prompt mel ``cond``. One level: down block (resnet + transformers + causal
conv, no time downsampling) -> mid blocks -> up block (with the skip) -> causal block -> 1x1 conv.
Every conv is causal, so with chunk-causal attention (streaming) a frame never sees a later chunk.
Upstream: ``cosyvoice/flow/decoder.py`` on Matcha-TTS ``models/components/{decoder,transformer}.py``
(diffusers attention). Parameter names follow the official ``flow.pt`` keys under ``decoder.estimator.``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.models.flow.masks import chunk_causal_mask, new_rows_see_every_key
from cosyvoice_mac.models.flow.prefix import StepState, causal_left_pad

TIME_SCALE = 1000  # t in [0, 1] is stretched to [0, 1000] before the sinusoid
FF_MULT = 4  # transformer feed-forward width = 4 x channels (Matcha default)
TIME_EMBED_MULT = 4  # time MLP width = 4 x channels[0]


@dataclass
class UNetConfig:
    """Sizes of the v2 estimator (yaml ``flow.decoder.estimator``); the full model is 256 wide."""

    in_channels: int = 320  # x, mu, speaker, cond stacked: 4 x 80
    out_channels: int = 80
    channels: int = 256
    attention_head_dim: int = 64
    num_heads: int = 8
    n_blocks: int = 4  # transformer blocks per resnet
    num_mid_blocks: int = 12
    static_chunk_size: int = 50  # attention chunk in mel frames when streaming

    @classmethod
    def from_yaml(cls, node: dict) -> "UNetConfig":
        where = "flow.decoder.estimator"
        channels = list(node.get("channels", [256, 256]))
        if len(channels) != 1:
            raise ConfigError(
                f"{where}: channels={channels} describes a multi-level U-Net; only the single-level "
                "CosyVoice2 estimator (e.g. channels: [256]) is supported"
            )
        act_fn = node.get("act_fn", "snake")
        if act_fn != "gelu":
            raise ConfigError(f"{where}: act_fn={act_fn!r} is not supported (CosyVoice2 uses 'gelu')")
        return cls(
            in_channels=int(node.get("in_channels", 320)),
            out_channels=int(node.get("out_channels", 80)),
            channels=int(channels[0]),
            attention_head_dim=int(node.get("attention_head_dim", 64)),
            num_heads=int(node.get("num_heads", 4)),
            n_blocks=int(node.get("n_blocks", 1)),
            num_mid_blocks=int(node.get("num_mid_blocks", 2)),
            static_chunk_size=int(node.get("static_chunk_size", 50)),
        )


def sinusoidal_time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t (B,)`` in [0, 1] -> ``(B, dim)`` fp32 ``[sin(1000 t f_k), cos(1000 t f_k)]``, ``f_k = 10000^(-k/(dim/2-1))``.

    Always fp32: 1000 t needs more mantissa than bf16 has.
    """
    half = dim // 2
    step = math.log(10000) / (half - 1)
    frequencies = torch.exp(torch.arange(half, device=t.device).float() * -step)
    angles = TIME_SCALE * t.float().unsqueeze(1) * frequencies.unsqueeze(0)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    """Owns ``linear_1`` and ``linear_2``: Linear -> SiLU -> Linear. ``(B, C_in) -> (B, 4 channels)``."""

    def __init__(self, in_channels: int, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class CausalConv1d(nn.Conv1d):
    """A stride-1 Conv1d left-padded by ``kernel_size - 1``: frame t sees frames t-k+1..t.

    ``(B, C, T) -> (B, C', T)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        return super().forward(causal_left_pad(self, x, self.kernel_size[0] - 1, state))


class _SwapTimeAndChannels(nn.Module):
    """(B, C, T) <-> (B, T, C); a placeholder that keeps the official Sequential indices."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)


class CausalBlock1D(nn.Module):
    """Owns ``block`` = causal conv k3 (``block.0``) -> LayerNorm over channels (``block.2``) -> Mish.

    ``(x (B, C, T), mask (B, 1, T)) -> (B, C', T)``, masked before and after.
    """

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        self.block = nn.Sequential(
            CausalConv1d(dim, dim_out, 3),
            _SwapTimeAndChannels(),
            nn.LayerNorm(dim_out),
            _SwapTimeAndChannels(),
            nn.Mish(),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        h = self.block[0](x * mask, state)
        for layer in self.block[1:]:
            h = layer(h)
        return h * mask


class CausalResnetBlock1D(nn.Module):
    """Owns ``mlp`` (Mish -> Linear of the time embedding), ``block1``, ``block2`` and the 1x1 ``res_conv``."""

    def __init__(self, dim: int, dim_out: int, time_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_dim, dim_out))
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, time: torch.Tensor, state: StepState | None = None
    ) -> torch.Tensor:
        """``x (B, C, T)``, ``mask (B, 1, T)``, ``time (B, time_dim)`` -> ``(B, C', T)``."""
        h = self.block1(x, mask, state) + self.mlp(time).unsqueeze(-1)
        h = self.block2(h, mask, state)
        return h + self.res_conv(x * mask)


class SelfAttention(nn.Module):
    """Owns ``to_q``/``to_k``/``to_v`` (no bias) and ``to_out.0``; scaled dot-product over ``heads`` heads."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        """``x (B, T, D)``, bool ``mask`` broadcastable to ``(B, 1, T, T)`` (True = may attend) -> ``(B, T, D)``.

        With a prefix ``state`` the keys and values are the prefix's followed by these frames'.
        """
        batch, length, _ = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(batch, length, self.heads, -1).transpose(1, 2)

        keys, values = split(self.to_k(x)), split(self.to_v(x))
        if state is not None:
            keys, values = state.keys_and_values(self, keys, values)
        out = F.scaled_dot_product_attention(split(self.to_q(x)), keys, values, mask)
        return self.to_out[0](out.transpose(1, 2).reshape(batch, length, -1))


class _GeluProjection(nn.Module):
    """Owns ``proj``: Linear followed by exact (erf) GELU."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.proj = nn.Linear(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class FeedForward(nn.Module):
    """Owns ``net.0.proj`` and ``net.2`` (index 1 is upstream's dropout): Linear -> GELU -> Linear."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(_GeluProjection(dim, hidden), nn.Identity(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerBlock(nn.Module):
    """Owns ``norm1``, ``attn1``, ``norm3``, ``ff``: pre-norm self-attention and feed-forward residuals."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = SelfAttention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, FF_MULT * dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        """``x (B, T, D)`` -> ``(B, T, D)``; ``mask`` as in :class:`SelfAttention`."""
        x = x + self.attn1(self.norm1(x), mask, state)
        return x + self.ff(self.norm3(x))


class CausalConditionalDecoder(nn.Module):
    """Owns the whole v2 estimator: ``time_mlp``, ``down_blocks``, ``mid_blocks``, ``up_blocks``,
    ``final_block``, ``final_proj`` (each block list is ``[resnet, transformer blocks(, causal conv)]``).
    """

    def __init__(self, config: UNetConfig):
        super().__init__()
        self.config = config
        width = config.channels
        time_dim = TIME_EMBED_MULT * width

        def stage(dim_in: int, with_conv: bool) -> nn.ModuleList:
            transformers = nn.ModuleList(
                TransformerBlock(width, config.num_heads, config.attention_head_dim) for _ in range(config.n_blocks)
            )
            parts = [CausalResnetBlock1D(dim_in, width, time_dim), transformers]
            if with_conv:
                parts.append(CausalConv1d(width, width, 3))
            return nn.ModuleList(parts)

        self.time_mlp = TimestepEmbedding(config.in_channels, time_dim)
        self.down_blocks = nn.ModuleList([stage(config.in_channels, with_conv=True)])
        self.mid_blocks = nn.ModuleList(stage(width, with_conv=False) for _ in range(config.num_mid_blocks))
        self.up_blocks = nn.ModuleList([stage(2 * width, with_conv=True)])
        self.final_block = CausalBlock1D(width, width)
        self.final_proj = nn.Conv1d(width, config.out_channels, 1)

    def _attention_mask(self, mask: torch.Tensor, streaming: bool, prefix_frames: int = 0) -> torch.Tensor:
        """Padding mask ``(B, 1, T)`` -> bool ``(B, 1, 1, T)`` (full) or ``(B, 1, T, T)`` (chunk-causal).

        With ``prefix_frames`` cached frames in front: ``(B, 1, T, prefix + T)``, the prefix all visible.
        """
        keys = (mask != 0).unsqueeze(1)
        if not streaming:
            return keys
        chunked = chunk_causal_mask(prefix_frames + mask.shape[-1], self.config.static_chunk_size, mask.device)
        if prefix_frames:  # every new frame is valid (Flow.inference): no device sync, so graphs can capture this
            # One new chunk sees everything: no mask lets SDPA take its faster unmasked path.
            if new_rows_see_every_key(prefix_frames, mask.shape[-1], self.config.static_chunk_size):
                return None
            return chunked[prefix_frames:].expand(mask.shape[0], 1, -1, -1)
        return keys & chunked

    @staticmethod
    def _transform(x: torch.Tensor, blocks: nn.ModuleList, mask: torch.Tensor, state: StepState | None) -> torch.Tensor:
        h = x.transpose(1, 2)
        for block in blocks:
            h = block(h, mask, state)
        return h.transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
        state: StepState | None = None,
    ) -> torch.Tensor:
        """Velocity ``(B, out, T)`` of noisy mel ``x (B, 80, T)`` at time ``t (B,)``.

        ``mask (B, 1, T)`` (1 = valid frame), token features ``mu (B, 80, T)``, speaker ``spks (B, 80)``,
        prompt mel ``cond (B, 80, T)`` (zeros after the prompt). ``streaming`` selects chunk-causal attention.
        ``state`` (streaming only): record this call as a cached prefix, or continue after a recorded one.
        """
        length = x.shape[-1]
        stacked = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, length).to(x.dtype), cond], dim=1)
        if stacked.shape[1] != self.config.in_channels:
            raise ValueError(
                f"x, mu, spks and cond stack to {stacked.shape[1]} channels; this estimator expects "
                f"{self.config.in_channels}"
            )
        mask = mask.to(x.dtype)
        time = self.time_mlp(sinusoidal_time_embedding(t, self.config.in_channels).to(x.dtype))
        prefix_frames = 0 if state is None or state.recording else state.frames
        attention_mask = self._attention_mask(mask, streaming, prefix_frames)

        resnet, transformers, conv = self.down_blocks[0]
        h = self._transform(resnet(stacked, mask, time, state), transformers, attention_mask, state)
        skip = h
        h = conv(h * mask, state)
        for resnet, transformers in self.mid_blocks:
            h = self._transform(resnet(h, mask, time, state), transformers, attention_mask, state)
        resnet, transformers, conv = self.up_blocks[0]
        h = self._transform(resnet(torch.cat([h, skip], dim=1), mask, time, state), transformers, attention_mask, state)
        h = conv(h * mask, state)
        h = self.final_block(h, mask, state)
        return self.final_proj(h * mask) * mask
