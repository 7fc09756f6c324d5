"""The Qwen2 decoder stack of the speech LM in MLX (mirrors ``cosyvoice_mac.models.llm.qwen2``).

Same numerics as the PyTorch model: RMSNorm with float32 statistics, NeoX rotate-half RoPE
(``mx.fast.rope``, ``traditional=False``), grouped-query attention (``mx.fast.scaled_dot_product_attention``
takes the 2 KV heads as they are), SiLU-gated MLP. The config is the same :class:`Qwen2Config`.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from cosyvoice_mac.models.llm.qwen2 import Qwen2Config

CACHE_STEP = 256  # positions the KV cache grows by (a request re-allocates only every 256 tokens)


class KVCache:
    """Owns one request's keys/values per layer, ``(B, KVH, capacity, head_dim)``, grown in 256-position steps.

    ``length`` positions are filled. ``store`` writes a forward pass's new positions and returns views of
    every filled position, so a decode step never recomputes or re-copies the prefix.
    """

    def __init__(self, config: Qwen2Config, max_positions: int):
        if max_positions > config.max_position_embeddings:
            raise ValueError(
                f"a request needs {max_positions} positions but the Qwen2 config allows "
                f"max_position_embeddings={config.max_position_embeddings}: use a shorter text or prompt"
            )
        self.max_positions = max_positions
        self.keys: list[mx.array | None] = [None] * config.num_hidden_layers
        self.values: list[mx.array | None] = [None] * config.num_hidden_layers
        self.length = 0

    def store(self, layer: int, start: int, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Write ``(B, KVH, T, hd)`` at ``start..start+T-1``; return positions ``0..start+T-1``."""
        end = start + keys.shape[2]
        if end > self.max_positions:
            raise ValueError(f"KV cache full: position {end} exceeds its capacity {self.max_positions}")
        held = self.keys[layer]
        if held is None or held.shape[2] < end:
            grown = min(((end + CACHE_STEP - 1) // CACHE_STEP) * CACHE_STEP, self.max_positions)
            shape = (keys.shape[0], keys.shape[1], grown, keys.shape[3])
            new_keys, new_values = mx.zeros(shape, keys.dtype), mx.zeros(shape, values.dtype)
            if held is not None:
                new_keys[:, :, :start] = held[:, :, :start]
                new_values[:, :, :start] = self.values[layer][:, :, :start]
            self.keys[layer], self.values[layer] = new_keys, new_values
        self.keys[layer][:, :, start:end] = keys
        self.values[layer][:, :, start:end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class RMSNorm(nn.Module):
    """Owns one RMSNorm gain; statistics in float32 (``mx.fast.rms_norm`` accumulates in float32)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = mx.ones((size,))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    """Owns q/k/v (with bias) and o (no bias) of one GQA self-attention layer."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def _heads(self, x: mx.array, heads: int) -> mx.array:
        batch, steps, _ = x.shape
        return x.reshape(batch, steps, heads, self.head_dim).transpose(0, 2, 1, 3)

    def _rope(self, x: mx.array, start: int) -> mx.array:
        return mx.fast.rope(x, self.head_dim, traditional=False, base=self.rope_theta, scale=1.0, offset=start)

    def __call__(self, x: mx.array, start: int, layer: int, cache: KVCache | None) -> mx.array:
        """x ``(B, T, D)`` at positions ``start..start+T-1`` -> ``(B, T, D)``."""
        batch, steps, _ = x.shape
        queries = self._rope(self._heads(self.q_proj(x), self.heads), start)
        keys = self._rope(self._heads(self.k_proj(x), self.kv_heads), start)
        values = self._heads(self.v_proj(x), self.kv_heads)
        if cache is not None:
            keys, values = cache.store(layer, start, keys, values)
        total = keys.shape[2]
        if steps == 1:
            mask = None  # one query sees every cached position
        elif total == steps:
            mask = "causal"
        else:  # a chunk after cached positions: query i (absolute start+i) sees keys 0..start+i
            mask = mx.arange(total)[None, :] <= mx.arange(start, start + steps)[:, None]
        attended = mx.fast.scaled_dot_product_attention(queries, keys, values, scale=self.head_dim**-0.5, mask=mask)
        return self.o_proj(attended.transpose(0, 2, 1, 3).reshape(batch, steps, -1))


class MLP(nn.Module):
    """Owns the SiLU-gated feed-forward projections of one layer."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Owns one pre-norm transformer block (attention and MLP with their RMSNorms)."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def __call__(self, x: mx.array, start: int, layer: int, cache: KVCache | None) -> mx.array:
        x = x + self.self_attn(self.input_layernorm(x), start, layer, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nn.Module):
    """Owns the text embedding table, the decoder layers and the final norm (HF ``Qwen2Model`` names)."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = [DecoderLayer(config) for _ in range(config.num_hidden_layers)]
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.config, capacity)

    def __call__(self, inputs_embeds: mx.array, cache: KVCache | None = None) -> mx.array:
        """inputs_embeds ``(B, T, D)`` -> final-norm hidden states ``(B, T, D)``.

        Without a cache the positions are 0..T-1 (causal); with one they follow ``cache.length`` and are
        appended to it.
        """
        start = cache.length if cache is not None else 0
        hidden = inputs_embeds
        for index, layer in enumerate(self.layers):
            hidden = layer(hidden, start, index, cache)
        if cache is not None:
            cache.length = start + inputs_embeds.shape[1]
        return self.norm(hidden)
