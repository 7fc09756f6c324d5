"""CosyVoice2 token encoder: ``UpsampleConformerEncoder`` (token embeddings -> frame features, x2 in time).

Linear embed -> pre-look-ahead conv -> N Conformer layers -> nearest x2 upsample + causal conv ->
second linear embed -> 4 Conformer layers -> LayerNorm. The Conformer layers have neither macaron
feed-forward nor convolution module; attention is Transformer-XL style with ESPnet's relative
positional encoding. Upstream: ``cosyvoice/transformer/{upsample_encoder,encoder_layer,attention,
embedding,subsampling}.py``. Parameter names follow the official ``flow.pt`` keys under ``encoder.``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.config import ConfigError, require
from cosyvoice_mac.models.flow.lookahead import PreLookaheadLayer
from cosyvoice_mac.models.flow.masks import chunk_causal_mask

EMBED_NORM_EPS = 1e-5  # LayerNorm of embed / up_embed and after_norm
LAYER_NORM_EPS = 1e-12  # LayerNorms inside the Conformer layers (wenet default)
NUM_UP_BLOCKS = 4  # hard-coded upstream, not in the yaml
PRE_LOOKAHEAD_LEN = 3  # hard-coded upstream, not in the yaml
UPSAMPLE_STRIDE = 2  # hard-coded upstream: one token -> two mel frames

# yaml value each supported option must have (absent keys take the upstream class default).
_REQUIRED_OPTIONS = {
    "input_layer": ("conv2d", "linear"),
    "pos_enc_layer_type": ("rel_pos", "rel_pos_espnet"),
    "selfattention_layer_type": ("rel_selfattn", "rel_selfattn"),
    "normalize_before": (True, True),
    "macaron_style": (True, False),
    "use_cnn_module": (True, False),
    "activation_type": ("swish", "swish"),
    "key_bias": (True, True),
    "use_dynamic_chunk": (False, False),
}


@dataclass
class ConformerConfig:
    """Sizes of the v2 token encoder (yaml ``flow.encoder``); the full model is 512 wide, 6 + 4 layers."""

    input_size: int = 512
    output_size: int = 512
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    static_chunk_size: int = 25  # attention chunk in tokens when streaming (x2 after upsampling)
    num_up_blocks: int = NUM_UP_BLOCKS
    pre_lookahead_len: int = PRE_LOOKAHEAD_LEN
    upsample_stride: int = UPSAMPLE_STRIDE

    @classmethod
    def from_yaml(cls, node: dict) -> "ConformerConfig":
        where = "flow.encoder"
        for key, (default, supported) in _REQUIRED_OPTIONS.items():
            value = node.get(key, default)
            if value != supported:
                raise ConfigError(
                    f"{where}: {key}={value!r} is not supported (CosyVoice2 uses {supported!r}); "
                    "use the cosyvoice2.yaml shipped with the model"
                )
        output_size = int(node.get("output_size", 256))
        heads = int(node.get("attention_heads", 4))
        if output_size % heads:
            raise ConfigError(f"{where}: output_size {output_size} is not divisible by attention_heads {heads}")
        return cls(
            input_size=int(require(node, "input_size", where)),
            output_size=output_size,
            attention_heads=heads,
            linear_units=int(node.get("linear_units", 2048)),
            num_blocks=int(node.get("num_blocks", 6)),
            static_chunk_size=int(node.get("static_chunk_size", 0)),
        )


def relative_position_encoding(length: int, d_model: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """ESPnet relative sinusoids for offsets ``L-1, L-2, ..., 0, ..., -(L-1)``: ``(1, 2L-1, d_model)``.

    Row m holds offset ``p = L-1-m`` as interleaved ``[sin(p w_0), cos(p w_0), sin(p w_1), ...]`` with
    ``w_k = 10000^(-2k/d_model)``. Computed for the length at hand in fp32 (upstream slices a
    5000-long table whose rows are the same numbers).
    """
    offsets = torch.arange(length - 1, -length, -1, device=device, dtype=torch.float32).unsqueeze(1)
    frequencies = torch.exp(
        torch.arange(0, d_model, 2, device=device, dtype=torch.float32) * -(math.log(10000.0) / d_model)
    )
    angles = offsets * frequencies
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)
    return table.unsqueeze(0).to(dtype)


def _relative_shift(scores: torch.Tensor) -> torch.Tensor:
    """``(B, H, T, 2T-1)`` scores against offsets ``T-1..-(T-1)`` -> ``(B, H, T, T)`` indexed by key.

    Transformer-XL shift: output ``[i, j]`` is input ``[i, T-1-i+j]``, the score for offset ``i-j``.
    Done with a pad and reshapes (no gather), which every backend runs.
    """
    batch, heads, length, width = scores.shape
    padded = F.pad(scores, (1, 0)).view(batch, heads, width + 1, length)
    return padded[:, :, 1:].reshape(batch, heads, length, width)[..., :length]


class LinearEmbedding(nn.Module):
    """Owns ``out`` = Linear + LayerNorm (keys ``out.0``, ``out.1``); scales by sqrt(d).

    ``(B, T, C_in) -> (B, T, D)``.
    """

    def __init__(self, input_size: int, output_size: int):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(input_size, output_size), nn.LayerNorm(output_size, eps=EMBED_NORM_EPS))
        self.scale = math.sqrt(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) * self.scale


class RelPositionMultiHeadAttention(nn.Module):
    """Owns q/k/v/out/pos projections and the per-head biases ``pos_bias_u``/``pos_bias_v`` ``(H, d_k)``.

    ``score(i, j) = [(q_i + u)·k_j + (q_i + v)·W_pos p_(i-j)] / sqrt(d_k)``.
    """

    def __init__(self, size: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = size // heads
        self.linear_q = nn.Linear(size, size)
        self.linear_k = nn.Linear(size, size)
        self.linear_v = nn.Linear(size, size)
        self.linear_out = nn.Linear(size, size)
        self.linear_pos = nn.Linear(size, size, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.head_dim))

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1, self.heads, self.head_dim)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``x (B, T, D)``, ``pos (1, 2T-1, D)``, ``mask`` bool ``(T, T)`` (True = may attend) or None
        -> ``(B, T, D)``."""
        batch, length, _ = x.shape
        q = self._split_heads(self.linear_q(x))  # (B, T, H, d_k)
        k = self._split_heads(self.linear_k(x)).transpose(1, 2)
        v = self._split_heads(self.linear_v(x)).transpose(1, 2)
        p = self._split_heads(self.linear_pos(pos)).transpose(1, 2)  # (1, H, 2T-1, d_k)
        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        position = _relative_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1)))
        scores = (content + position) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        return self.linear_out(context)


class FeedForward(nn.Module):
    """Owns ``w_1`` and ``w_2``: Linear -> SiLU -> Linear. ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Linear(size, hidden)
        self.w_2 = nn.Linear(hidden, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Owns ``self_attn``, ``feed_forward``, ``norm_mha``, ``norm_ff``: two pre-norm residual sub-blocks."""

    def __init__(self, size: int, heads: int, hidden: int):
        super().__init__()
        self.self_attn = RelPositionMultiHeadAttention(size, heads)
        self.feed_forward = FeedForward(size, hidden)
        self.norm_mha = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm_ff = nn.LayerNorm(size, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``x (B, T, D)`` -> ``(B, T, D)``; see :class:`RelPositionMultiHeadAttention` for ``pos``/``mask``."""
        x = x + self.self_attn(self.norm_mha(x), pos, mask)
        return x + self.feed_forward(self.norm_ff(x))


class Upsample1D(nn.Module):
    """Owns ``conv`` (k = 2*stride+1): nearest upsample by ``stride``, then a causal conv.

    ``(B, C, T) -> (B, C, sT)``.
    """

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, kernel_size=2 * stride + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.repeat_interleave(self.stride, dim=2)
        return self.conv(F.pad(x, (2 * self.stride, 0)))


class UpsampleConformerEncoder(nn.Module):
    """Owns the whole v2 token->frame encoder (``embed`` ... ``after_norm``); no positional table is stored.

    Every frame is valid (no padding). When ``streaming`` the attention is chunk-causal with
    ``static_chunk_size`` tokens before and ``stride`` times that many frames after upsampling,
    so frames of finished chunks do not change when more tokens arrive.
    """

    def __init__(self, config: ConformerConfig):
        super().__init__()
        self.config = config
        size = config.output_size

        def conformer_layers(count: int) -> nn.ModuleList:
            return nn.ModuleList(
                ConformerLayer(size, config.attention_heads, config.linear_units) for _ in range(count)
            )

        self.embed = LinearEmbedding(config.input_size, size)
        # Upstream hard-codes 512 for these widths; 512 is the released output_size.
        self.pre_lookahead_layer = PreLookaheadLayer(size, size, config.pre_lookahead_len)
        self.encoders = conformer_layers(config.num_blocks)
        self.up_layer = Upsample1D(size, config.upsample_stride)
        self.up_embed = LinearEmbedding(size, size)
        self.up_encoders = conformer_layers(config.num_up_blocks)
        self.after_norm = nn.LayerNorm(size, eps=EMBED_NORM_EPS)

    def _mask(self, length: int, chunk_size: int, streaming: bool, device: torch.device) -> torch.Tensor | None:
        if not streaming or chunk_size <= 0:
            return None
        return chunk_causal_mask(length, chunk_size, device)

    def _run_layers(self, layers: nn.ModuleList, x: torch.Tensor, chunk_size: int, streaming: bool) -> torch.Tensor:
        length = x.shape[1]
        pos = relative_position_encoding(length, self.config.output_size, x.device, x.dtype)
        mask = self._mask(length, chunk_size, streaming, x.device)
        for layer in layers:
            x = layer(x, pos, mask)
        return x

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, streaming: bool = False) -> torch.Tensor:
        """Token embeddings ``x (B, L, C_in)`` -> frame features ``(B, stride*L, D)``.

        ``context (B, Lc, C_in)``: embeddings of the look-ahead tokens that follow ``x`` (an
        intermediate streaming call); None (or Lc = 0) means zeros, i.e. the end of the utterance.
        """
        if x.dim() != 3 or x.shape[-1] != self.config.input_size:
            raise ValueError(
                f"encoder input must be (B, L, {self.config.input_size}) token embeddings, got {tuple(x.shape)}"
            )
        chunk = self.config.static_chunk_size
        x = self.embed(x)
        if context is not None and context.shape[1] > 0:
            context = self.embed(context.to(x.dtype))
        else:
            context = None
        x = self.pre_lookahead_layer(x, context)
        x = self._run_layers(self.encoders, x, chunk, streaming)
        x = self.up_layer(x.transpose(1, 2)).transpose(1, 2)
        x = self.up_embed(x)
        x = self._run_layers(self.up_encoders, x, chunk * self.config.upsample_stride, streaming)
        return self.after_norm(x)
