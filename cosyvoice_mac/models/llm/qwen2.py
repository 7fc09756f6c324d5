"""A minimal Qwen2 decoder stack (the text/speech backbone of the CosyVoice2/3 speech LM).

Numerics follow Hugging Face ``transformers`` 4.51 ``Qwen2Model`` (the reference): RMSNorm in
float32, NeoX "rotate-half" RoPE with cos/sin built in float32 then cast, GQA, SiLU-gated MLP.
Decoding uses a :class:`StaticKVCache` allocated once per request and written in place, so a
decode step allocates no growing tensors and never recomputes the prefix.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.config import ConfigError


@dataclass
class Qwen2Config:
    """Backbone sizes from ``CosyVoice-BlankEN/config.json``."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    max_position_embeddings: int
    head_dim: int = 0  # 0: hidden_size // num_attention_heads (the Qwen2 default)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            if self.hidden_size % self.num_attention_heads:
                raise ConfigError(
                    f"Qwen2 hidden_size {self.hidden_size} is not a multiple of "
                    f"num_attention_heads {self.num_attention_heads}"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"Qwen2 num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ConfigError(f"Qwen2 head_dim {self.head_dim} must be even for rotary embeddings")

    @property
    def queries_per_kv_head(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_json(cls, path: str | Path) -> Qwen2Config:
        """Read a Hugging Face Qwen2 ``config.json``; unknown keys are ignored."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise ConfigError(f"cannot read Qwen2 config {path}: {error}") from error
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path} is not valid JSON: {error}") from error
        if not isinstance(data, dict):
            raise ConfigError(f"{path} does not hold a JSON object")
        if data.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{path}: hidden_act {data['hidden_act']!r} is not supported (only 'silu')")
        if data.get("rope_scaling"):
            raise ConfigError(f"{path}: rope_scaling {data['rope_scaling']!r} is not supported")
        if data.get("use_sliding_window"):
            raise ConfigError(f"{path}: use_sliding_window=true is not supported")
        names = (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "rms_norm_eps", "rope_theta", "vocab_size", "max_position_embeddings",
        )
        missing = [name for name in names if name not in data]
        if missing:
            raise ConfigError(f"{path} lacks {', '.join(missing)}")
        values = {name: data[name] for name in names}
        if data.get("head_dim"):
            values["head_dim"] = int(data["head_dim"])
        for name in ("rms_norm_eps", "rope_theta"):
            values[name] = float(values[name])
        return cls(**values)


class StaticKVCache:
    """Owns one request's key/value tensors for every layer, allocated once at full capacity.

    keys / values: (num_layers, B, num_key_value_heads, capacity, head_dim). ``length`` positions
    are filled; a forward pass writes its new positions in place and advances ``length``.
    """

    def __init__(
        self,
        config: Qwen2Config,
        capacity: int,
        *,
        device: torch.device,
        dtype: torch.dtype,
        batch_size: int = 1,
    ):
        if capacity > config.max_position_embeddings:
            raise ValueError(
                f"a request needs {capacity} positions but the Qwen2 config allows "
                f"max_position_embeddings={config.max_position_embeddings}: use a shorter text or prompt"
            )
        shape = (config.num_hidden_layers, batch_size, config.num_key_value_heads, capacity, config.head_dim)
        self.keys = torch.empty(shape, device=device, dtype=dtype)
        self.values = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def store(self, layer: int, start: int, keys: torch.Tensor, values: torch.Tensor):
        """Write (B, KVH, T, hd) at positions ``start..start+T-1``; return views of positions ``0..start+T-1``."""
        end = start + keys.shape[2]
        if end > self.capacity:
            raise ValueError(f"KV cache full: position {end} exceeds its capacity {self.capacity}")
        self.keys[layer, :, :, start:end].copy_(keys)
        self.values[layer, :, :, start:end].copy_(values)
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


class RotaryTable:
    """Owns cached RoPE cos/sin rows (positions x head_dim) for one device and dtype.

    Built on the CPU in float32 exactly as Hugging Face does (``inv_freq = 1/θ^(2i/d)``,
    ``freqs = pos·inv_freq``, ``cat(freqs, freqs)``), then cast and moved, so every device sees
    the same table.
    """

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        self.head_dim = head_dim
        self.theta = theta
        self.max_positions = max_positions
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    @torch.inference_mode(False)
    def _build(self, length: int, device: torch.device, dtype: torch.dtype) -> None:
        # Ordinary (not inference-mode) tensors: the table is reused by later calls in any mode.
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        inv_freq = 1.0 / (self.theta ** exponent)
        positions = torch.arange(length, dtype=torch.int64).float()
        freqs = positions[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        self._cos = angles.cos().to(device=device, dtype=dtype)
        self._sin = angles.sin().to(device=device, dtype=dtype)

    def rows(self, start: int, count: int, device: torch.device, dtype: torch.dtype):
        """cos, sin of positions ``start..start+count-1``: each (count, head_dim)."""
        end = start + count
        table = self._cos
        if table is None or table.shape[0] < end or table.device != device or table.dtype != dtype:
            # Grow in powers of two so a request's decode steps rebuild the table at most once.
            size = min(max(end, 2 * (table.shape[0] if table is not None else 0), 256), self.max_positions)
            if end > size:
                raise ValueError(f"position {end} exceeds max_position_embeddings={self.max_positions}")
            self._build(size, device, dtype)
        return self._cos[start:end], self._sin[start:end]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Qwen2RMSNorm(nn.Module):
    """Owns the gain of one RMSNorm (statistics in float32, as the reference)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class Qwen2Attention(nn.Module):
    """Owns the q/k/v (with bias) and o (no bias) projections of one GQA self-attention layer."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, start: int, layer: int, cache: StaticKVCache | None) -> torch.Tensor:
        """x: (B, T, D) at positions ``start..start+T-1``; cos/sin: (T, head_dim)."""
        batch, steps, _ = x.shape
        kv_heads, head_dim = self.num_kv_heads, self.head_dim
        group = self.num_heads // kv_heads
        keys = _rotate(self.k_proj(x).view(batch, steps, kv_heads, head_dim).transpose(1, 2), cos, sin)
        values = self.v_proj(x).view(batch, steps, kv_heads, head_dim).transpose(1, 2)
        if cache is not None:
            keys, values = cache.store(layer, start, keys, values)
        if steps == 1:
            # One query position attends to every cached one (no mask needed); the query heads that
            # share a KV head are laid out as that head's "query rows", so K/V are never repeated.
            queries = _rotate(self.q_proj(x).view(batch, kv_heads, group, head_dim), cos, sin)
            attended = F.scaled_dot_product_attention(queries, keys, values)
            return self.o_proj(attended.reshape(batch, 1, self.num_heads * head_dim))
        queries = _rotate(self.q_proj(x).view(batch, steps, self.num_heads, head_dim).transpose(1, 2), cos, sin)
        total = keys.shape[2]
        if group > 1:
            repeated = (batch, kv_heads, group, total, head_dim)
            keys = keys[:, :, None].expand(repeated).reshape(batch, -1, total, head_dim)
            values = values[:, :, None].expand(repeated).reshape(batch, -1, total, head_dim)
        if total == steps:
            attended = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
        else:
            # A chunk after cached positions: query i (absolute start+i) sees keys 0..start+i.
            key_positions = torch.arange(total, device=x.device)
            query_positions = torch.arange(start, start + steps, device=x.device)
            allowed = key_positions[None, :] <= query_positions[:, None]
            attended = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
        return self.o_proj(attended.transpose(1, 2).reshape(batch, steps, self.num_heads * head_dim))


class Qwen2MLP(nn.Module):
    """Owns the SiLU-gated feed-forward projections of one layer."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nn.Module):
    """Owns one pre-norm transformer block: attention and MLP with their RMSNorms."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.self_attn = Qwen2Attention(config)
        self.mlp = Qwen2MLP(config)
        self.input_layernorm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, start: int, layer: int, cache: StaticKVCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, start, layer, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nn.Module):
    """Owns the Qwen2 text embedding table, decoder layers and final norm (HF ``Qwen2Model`` keys)."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryTable(config.head_dim, config.rope_theta, config.max_position_embeddings)

    def new_cache(self, capacity: int, batch_size: int = 1) -> StaticKVCache:
        """A cache for ``capacity`` positions on this model's device and compute dtype.

        The compute dtype is the final norm's: the embedding table may be stored in 16 bits while
        the arithmetic stays float32 (see ``cosyvoice_mac.pipeline.precision``).
        """
        weight = self.norm.weight
        return StaticKVCache(self.config, capacity, device=weight.device, dtype=weight.dtype, batch_size=batch_size)

    def forward(self, inputs_embeds: torch.Tensor, cache: StaticKVCache | None = None) -> torch.Tensor:
        """inputs_embeds (B, T, D) -> final-RMSNorm hidden states (B, T, D).

        Without a cache the T positions are 0..T-1 with causal attention among them. With a cache
        they are ``cache.length..cache.length+T-1``, attend to every cached position, and are
        appended to the cache.
        """
        start = cache.length if cache is not None else 0
        steps = inputs_embeds.shape[1]
        cos, sin = self.rotary.rows(start, steps, inputs_embeds.device, inputs_embeds.dtype)
        hidden = inputs_embeds
        for index, layer in enumerate(self.layers):
            hidden = layer(hidden, cos, sin, start, index, cache)
        if cache is not None:
            cache.length = start + steps
        return self.norm(hidden)
