"""CosyVoice3 flow estimator: a Diffusion Transformer (DiT) with adaLN-zero conditioning on time.

Predicts the flow-matching velocity of a noisy mel given the token features ``mu``, the prompt
mel ``cond`` and the speaker vector. Upstream: ``cosyvoice/flow/DiT/{dit,modules}.py`` (an F5-TTS
DiT) with x-transformers 2.11 rotary embeddings. Module and parameter names follow the official
``flow.pt`` keys under ``decoder.estimator.``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.config import ConfigError, require
from cosyvoice_mac.device import is_cuda
from cosyvoice_mac.models.flow.masks import chunk_causal_mask, host_may_read, new_rows_see_every_key
from cosyvoice_mac.models.flow.prefix import StepState, causal_left_pad

TIME_FREQ_DIM = 256  # sinusoid width of the time embedding (upstream default, not in yaml)
TIME_SCALE = 1000  # t in [0, 1] is stretched to [0, 1000] before the sinusoid
CONV_POS_KERNEL = 31
CONV_POS_GROUPS = 16
ROPE_BASE = 10000.0
NORM_EPS = 1e-6


@dataclass
class DiTConfig:
    """Sizes of the DiT estimator (yaml ``flow.decoder.estimator``); the full model is 1024 x 22 blocks."""

    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    mel_dim: int = 80
    mu_dim: int = 80
    spk_dim: int = 80
    static_chunk_size: int = 50  # attention chunk in mel frames when streaming

    @classmethod
    def from_yaml(cls, node: dict) -> "DiTConfig":
        where = "flow.decoder.estimator"
        if node.get("long_skip_connection"):
            raise ConfigError(f"{where}: long_skip_connection=True is not supported (no released model uses it)")
        dim = int(require(node, "dim", where))
        return cls(
            dim=dim,
            depth=int(node.get("depth", 8)),
            heads=int(node.get("heads", 8)),
            dim_head=int(node.get("dim_head", 64)),
            ff_mult=int(node.get("ff_mult", 4)),
            mel_dim=int(node.get("mel_dim", 80)),
            mu_dim=int(node.get("mu_dim") or node.get("mel_dim", 80)),
            spk_dim=int(node.get("spk_dim") or 0),
            static_chunk_size=int(node.get("static_chunk_size", 50)),
        )


@dataclass
class AttentionMasks:
    """What attention may see: ``attention`` bool broadcastable to ``(B, H, T, T)`` (None = everything) and
    ``padded_rows (B, T, 1)`` marking padded query frames whose attention output is zeroed (None = none padded).
    """

    attention: torch.Tensor | None
    padded_rows: torch.Tensor | None


class TimestepEmbedding(nn.Module):
    """Owns ``time_mlp``: sinusoid(1000 t) of width 256 -> Linear -> SiLU -> Linear. ``t (B,) -> (B, dim)``."""

    def __init__(self, dim: int):
        super().__init__()
        self.time_mlp = nn.Sequential(nn.Linear(TIME_FREQ_DIM, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = TIME_FREQ_DIM // 2
        # The sinusoid is always computed in fp32: 1000 t needs more than bf16's 8 mantissa bits.
        step = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t.device).float() * -step)
        angles = TIME_SCALE * t.float().unsqueeze(1) * freqs.unsqueeze(0)
        sinusoid = torch.cat((angles.sin(), angles.cos()), dim=-1)
        return self.time_mlp(sinusoid.to(self.time_mlp[0].weight.dtype))


class CausalConvPositionEmbedding(nn.Module):
    """Owns two grouped causal convs (k 31, 16 groups) each followed by Mish. ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, dim: int):
        super().__init__()
        conv = lambda: nn.Conv1d(dim, dim, CONV_POS_KERNEL, groups=CONV_POS_GROUPS)  # noqa: E731
        self.conv1 = nn.Sequential(conv(), nn.Mish())
        self.conv2 = nn.Sequential(conv(), nn.Mish())

    def forward(self, x: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        h = x.transpose(1, 2)
        for conv, mish in (self.conv1, self.conv2):
            padded = causal_left_pad(conv, h, CONV_POS_KERNEL - 1, state)
            h = mish(_cuda_conv(conv, padded) if is_cuda(padded.device) else conv(padded))
        return h.transpose(1, 2)


def _cuda_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` on CUDA, through the CUDA tuning (imported here only: the CPU and MPS never load it)."""
    from cosyvoice_mac.models.cuda.products import grouped_conv1d

    return grouped_conv1d(conv, x)


class InputEmbedding(nn.Module):
    """Owns ``proj`` (features ``[x, cond, mu, spks]`` -> dim) and the convolutional position embedding."""

    def __init__(self, mel_dim: int, mu_dim: int, spk_dim: int, dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, dim)
        self.spk_dim = spk_dim
        self.conv_pos_embed = CausalConvPositionEmbedding(dim)

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor, state: StepState | None = None
    ) -> torch.Tensor:
        """``x, cond, mu (B, T, 80)``, ``spks (B, S)`` -> ``(B, T, dim)``."""
        parts = [x, cond, mu]
        if self.spk_dim > 0:
            parts.append(spks.unsqueeze(1).expand(-1, x.shape[1], -1))
        h = self.proj(torch.cat(parts, dim=-1))
        return self.conv_pos_embed(h, state) + h


class RotaryEmbedding(nn.Module):
    """Owns ``inv_freq`` (a checkpoint buffer). Interleaved-pair RoPE over the first ``dim`` channels only.

    The frequencies stay fp32 even if the module is cast to bf16/fp16: angles up to 15 000 rad
    would lose all phase accuracy in a 16-bit format.
    """

    def __init__(self, dim: int):
        super().__init__()
        inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def _apply(self, fn, recurse=True):
        inv_freq = self.inv_freq
        super()._apply(fn, recurse)
        self.inv_freq = inv_freq.to(self.inv_freq.device)
        return self

    def angles(self, length: int, start: int = 0) -> torch.Tensor:
        """``(T, dim)`` angles ``p * inv_freq[i]`` for positions ``start .. start + T - 1``,
        laid out ``[a0, a0, a1, a1, ...]``."""
        positions = torch.arange(start, start + length, device=self.inv_freq.device).float()
        angles = positions.unsqueeze(1) * self.inv_freq.unsqueeze(0)
        return angles.repeat_interleave(2, dim=-1)

    @staticmethod
    def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """Rotate channel pairs ``(2i, 2i+1)`` of ``x (B, T, C)`` by ``angles (T, R)``; channels >= R pass through."""
        width = angles.shape[-1]
        head, rest = x[..., :width], x[..., width:]
        pairs = head.unflatten(-1, (-1, 2))
        rotated_half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        head = head * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)
        return torch.cat((head, rest), dim=-1)

    @staticmethod
    def rotate_(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """In-place :meth:`rotate` of a fresh ``x``: only the rotated channels are written (no full copy)."""
        width = angles.shape[-1]
        head = x[..., :width]
        pairs = head.unflatten(-1, (-1, 2))
        rotated_half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        x[..., :width] = head * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)
        return x


class Attention(nn.Module):
    """Owns q/k/v/out projections (all with bias). RoPE is applied to the projections before the head split.

    Because the rotary table is one head wide, only head 0 gets positional rotation; this is the
    upstream behaviour the weights were trained with.
    """

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(
        self, x: torch.Tensor, angles: torch.Tensor, masks: AttentionMasks, state: StepState | None = None
    ) -> torch.Tensor:
        """``x (B, T, D)``, ``angles (T, R)`` -> ``(B, T, D)``; with a prefix ``state`` the keys include its frames."""
        batch, length, _ = x.shape
        q = RotaryEmbedding.rotate_(self.to_q(x), angles)
        k = RotaryEmbedding.rotate_(self.to_k(x), angles)
        v = self.to_v(x)
        # Head-major copies: the CPU flash kernel is ~15 % faster on contiguous q/k/v than the copies cost.
        q, k, v = (z.view(batch, length, self.heads, -1).transpose(1, 2).contiguous() for z in (q, k, v))
        if state is not None:
            k, v = state.keys_and_values(self, k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.attention)
        out = self.to_out[0](out.transpose(1, 2).reshape(batch, length, -1))
        if masks.padded_rows is not None:
            out = out.masked_fill(masks.padded_rows, 0.0)
        return out


class FeedForward(nn.Module):
    """Owns ``ff``: Linear(D, mult D) -> tanh-GELU -> Linear(mult D, D) (index 1 is upstream's dropout)."""

    def __init__(self, dim: int, mult: int):
        super().__init__()
        inner = dim * mult
        self.ff = nn.Sequential(
            nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
            nn.Identity(),
            nn.Linear(inner, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class AdaLayerNormZero(nn.Module):
    """Owns ``linear``: SiLU(temb) -> ``chunks`` modulation vectors of width D; LayerNorm has no affine."""

    def __init__(self, dim: int, chunks: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * chunks)
        self.chunks = chunks

    def modulation(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``temb (B, D)`` -> ``chunks`` tensors ``(B, 1, D)``."""
        return tuple(c.unsqueeze(1) for c in self.linear(F.silu(temb)).chunk(self.chunks, dim=1))


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=NORM_EPS)


class DiTBlock(nn.Module):
    """One pre-norm transformer block; time modulates both sub-layers (adaLN-zero, gates on the residuals)."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int):
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim, chunks=6)
        self.attn = Attention(dim, heads, dim_head)
        self.ff = FeedForward(dim, ff_mult)

    def forward(
        self,
        x: torch.Tensor,
        temb: torch.Tensor,
        angles: torch.Tensor,
        masks: AttentionMasks,
        state: StepState | None = None,
    ):
        """``x (B, T, D)``, ``temb (B, D)`` -> ``(B, T, D)``."""
        shift_attn, scale_attn, gate_attn, shift_ff, scale_ff, gate_ff = self.attn_norm.modulation(temb)
        # addcmul: one pass over the activations instead of two (x + g * y, shift + norm(x) * (1 + scale))
        attended = self.attn(torch.addcmul(shift_attn, _norm(x), 1 + scale_attn), angles, masks, state)
        x = torch.addcmul(x, gate_attn, attended)
        return torch.addcmul(x, gate_ff, self.ff(torch.addcmul(shift_ff, _norm(x), 1 + scale_ff)))


class DiT(nn.Module):
    """The v3 velocity estimator: time/input embeddings, RoPE table, ``depth`` DiT blocks, final adaLN + projection.

    Runs in the dtype of its parameters; callers pass inputs in any float dtype.
    """

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.config = config
        self.time_embed = TimestepEmbedding(config.dim)
        self.input_embed = InputEmbedding(config.mel_dim, config.mu_dim, config.spk_dim, config.dim)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(config.dim, config.heads, config.dim_head, config.ff_mult) for _ in range(config.depth)
        )
        self.norm_out = AdaLayerNormZero(config.dim, chunks=2)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def attention_masks(
        self, mask: torch.Tensor, streaming: bool, prefix_frames: int = 0, recording: bool = False
    ) -> AttentionMasks:
        """Masks for frame validity ``mask (B, 1, T)``; chunk-causal when streaming, else full attention.

        With ``prefix_frames`` cached frames in front, the rows are the new frames and the keys are
        prefix + new frames (every new frame sees the whole chunk-aligned prefix).
        """
        length = mask.shape[-1]
        allowed = None
        if streaming and self.config.static_chunk_size > 0:
            allowed = chunk_causal_mask(prefix_frames + length, self.config.static_chunk_size, mask.device)
            allowed = allowed[prefix_frames:]
        if prefix_frames or recording:
            # Every frame is valid after a prefix (Flow.inference) and in a prefix build (Flow.build_prefix): no
            # device sync, so graphs can capture both. One new chunk sees everything: no mask lets SDPA take its
            # faster unmasked path.
            sees_all = allowed is None or new_rows_see_every_key(prefix_frames, length, self.config.static_chunk_size)
            return AttentionMasks(None if sees_all else allowed, None)
        valid = mask.bool()
        # A length bucket's graph (cuda/flow_length_graphs.py) is captured with its padding masked, whatever it holds.
        if host_may_read(mask.device) and bool(valid.all()):
            return AttentionMasks(allowed, None)
        keys = valid.unsqueeze(1)  # (B, 1, 1, T)
        allowed = keys if allowed is None else allowed & keys
        return AttentionMasks(allowed, ~valid.transpose(1, 2))

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
        """``x, mu, cond (B, 80, T)``, ``mask (B, 1, T)``, ``t (B,)``, ``spks (B, 80)`` -> velocity ``(B, 80, T)``.

        ``state`` (streaming only): record this call's layer tensors as a prefix, or, once recorded,
        treat the inputs as the frames that follow that prefix.
        """
        dtype = self.proj_out.weight.dtype
        x, mu, cond, spks = (z.to(dtype) for z in (x, mu, cond, spks))
        prefix_frames = 0 if state is None or state.recording else state.frames
        temb = self.time_embed(t.reshape(-1).expand(x.shape[0]))
        h = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks, state)
        angles = self.rotary_embed.angles(h.shape[1], start=prefix_frames)
        masks = self.attention_masks(mask, streaming, prefix_frames, recording=state is not None and state.recording)
        for block in self.transformer_blocks:
            h = block(h, temb, angles, masks, state)
        scale, shift = self.norm_out.modulation(temb)
        h = _norm(h) * (1 + scale) + shift
        return self.proj_out(h).transpose(1, 2)
