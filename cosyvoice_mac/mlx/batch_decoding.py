"""Decoding several lines at once on MLX: the twin of ``models.llm.batch_decoding``'s device state.

The host loop (each line's sampler, its min_len mask and stop, lines leaving between steps) is the PyTorch one,
``models.llm.batch_decoding.decode_batch``, which asks ``MlxSpeechLM.start_batch`` for this state. A step reads
every weight once whatever the batch, and MLX's decoding is bound by reading them (unified memory on a Mac, the
CPU backend here), so B lines cost little more than one.

Each line's prompt is run alone, as its solo ``SpeechDecoder`` runs it, so its first log-probabilities are
bit-identical; its keys and values are then copied *left*-padded into one cache per layer ``(B, KVH, capacity,
head_dim)``: row ``i``'s prompt fills slots ``pad_i .. longest - 1``, every row writes the same slot each step,
its RoPE position is its own (``mx.fast.rope`` takes a vector of offsets, one a row) and its padding slots are
masked out of its attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import mlx.core as mx
import torch

from cosyvoice_mac.mlx.convert import to_torch
from cosyvoice_mac.mlx.qwen2 import Attention, DecoderLayer

if TYPE_CHECKING:
    from cosyvoice_mac.models.llm.batch_decoding import BatchLine


class MlxDecodingBatch:
    """Owns the decoding state of the lines still running: their keys and values per layer, each row's next RoPE
    position and padding, for ``lm`` (an ``MlxSpeechLM``). ``first_logp`` are the lines' first ``(V,)``
    log-probabilities (CPU tensors)."""

    def __init__(self, lm, lines: Sequence[BatchLine]):
        self.lm = lm
        lengths = [line.embeds.shape[1] for line in lines]
        longest = max(lengths)
        self.capacity = longest + max(line.max_len for line in lines)
        config = lm.config.qwen
        if self.capacity > config.max_position_embeddings:
            raise ValueError(
                f"a batch needs {self.capacity} positions but the Qwen2 config allows "
                f"max_position_embeddings={config.max_position_embeddings}: use a shorter text or prompt"
            )
        self.pads = mx.array([longest - length for length in lengths])
        self.positions = mx.array(lengths)  # each row's next RoPE position: its own prompt length
        self.padded = longest != min(lengths)
        self.length = longest  # slots filled
        solo = [self._prefill(line.embeds) for line in lines]
        self.first_logp = [logp for logp, _ in solo]
        self.keys, self.values = [], []
        for layer in range(config.num_hidden_layers):
            self.keys.append(self._padded([cache.keys[layer] for _, cache in solo], lengths, longest))
            self.values.append(self._padded([cache.values[layer] for _, cache in solo], lengths, longest))
        mx.eval(self.keys, self.values)

    def _prefill(self, embeds: mx.array):
        """One line's prompt alone, as ``SpeechDecoder`` runs it: its first log-probabilities and its cache."""
        cache = self.lm.backbone.new_cache(embeds.shape[1])
        hidden = self.lm.backbone(embeds.astype(self.lm.compute_dtype), cache)
        return to_torch(self.lm.next_log_probs(hidden)), cache

    def _padded(self, rows: list[mx.array], lengths: list[int], longest: int) -> mx.array:
        """Each row's ``(1, KVH, >=L_i, hd)`` cache as row ``i`` of ``(B, KVH, capacity, hd)``, left-padded."""
        placed = []
        for row, length in zip(rows, lengths):
            kv_heads, head_dim = row.shape[1], row.shape[3]
            before = mx.zeros((1, kv_heads, longest - length, head_dim), row.dtype)
            after = mx.zeros((1, kv_heads, self.capacity - longest, head_dim), row.dtype)
            placed.append(mx.concatenate([before, row[:, :, :length], after], axis=2))
        return mx.concatenate(placed, axis=0)

    def keep(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (the lines still decoding)."""
        index = mx.array(rows)
        self.keys = [keys[index] for keys in self.keys]
        self.values = [values[index] for values in self.values]
        self.pads, self.positions = self.pads[index], self.positions[index]

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one speech id per row; the rows' next ``(rows, V)`` float32 log-probabilities on the CPU."""
        lm = self.lm
        if self.length >= self.capacity:
            raise ValueError(f"KV cache full: position {self.length + 1} exceeds its capacity {self.capacity}")
        hidden = lm.speech_embedding(mx.array(tokens)[:, None]).astype(lm.compute_dtype)  # (B, 1, D)
        span = self.length + 1
        mask = None
        if self.padded:  # (B, 1, 1, span): a row sees its own slots only
            mask = (mx.arange(span)[None, :] >= self.pads[:, None])[:, None, None, :]
        for index, layer in enumerate(lm.backbone.layers):
            hidden = self._layer(layer, hidden, index, mask)
        self.length = span
        self.positions = self.positions + 1
        logits = lm.llm_decoder(lm.backbone.norm(hidden)[:, -1]).astype(mx.float32)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        mx.eval(logp, self.keys, self.values)
        return to_torch(logp)

    def _layer(self, layer: DecoderLayer, x: mx.array, index: int, mask) -> mx.array:
        x = x + self._attend(layer.self_attn, layer.input_layernorm(x), index, mask)
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _attend(self, attention: Attention, x: mx.array, index: int, mask) -> mx.array:
        """One position of each row through one layer's attention, its keys and values written at slot ``length``."""
        batch = x.shape[0]
        offsets = self.positions

        def rope(z: mx.array) -> mx.array:
            head_dim, base = attention.head_dim, attention.rope_theta
            return mx.fast.rope(z, head_dim, traditional=False, base=base, scale=1.0, offset=offsets)

        queries = rope(attention._heads(attention.q_proj(x), attention.heads))
        keys = rope(attention._heads(attention.k_proj(x), attention.kv_heads))
        values = attention._heads(attention.v_proj(x), attention.kv_heads)
        slot = self.length
        self.keys[index][:, :, slot : slot + 1] = keys
        self.values[index][:, :, slot : slot + 1] = values
        span = slot + 1
        attended = mx.fast.scaled_dot_product_attention(
            queries,
            self.keys[index][:, :, :span],
            self.values[index][:, :, :span],
            scale=attention.head_dim**-0.5,
            mask=mask,
        )
        return attention.o_proj(attended.transpose(0, 2, 1, 3).reshape(batch, 1, -1))
