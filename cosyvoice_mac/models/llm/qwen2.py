"""A minimal Qwen2 decoder stack (the text/speech backbone of the CosyVoice2/3 speech LM).

Numerics follow Hugging Face ``transformers`` 4.51 ``Qwen2Model`` (the reference): RMSNorm in
float32, NeoX "rotate-half" RoPE with cos/sin built in float32 then cast, GQA, SiLU-gated MLP.
Decoding uses a :class:`StaticKVCache` allocated once and written in place at a device-side
position, so a step allocates no growing tensors and never recomputes the prefix.

The step is lean because at batch 1 it is bound by how many operations it launches: q/k/v and
gate/up are one matrix each (the checkpoint keeps the official keys, see ``fusion.py``), RMSNorm is
``F.rms_norm`` (one fused kernel on CUDA and MPS; one ATen call on the CPU), RoPE rotates q and k
together in place, and one ``index_copy_`` per layer writes both keys and values: 15 operations a
layer (``tests/test_decode_step.py`` holds the budget). The one-position step is written flat with 2-D
activations (``decode_step.decode_layer``); the general ``forward`` serves the prefill.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.models.llm.decode_step import Attend, LayerPlan, StepPlan, added_projection, decode_layer, projection
from cosyvoice_mac.models.llm.fusion import fuse_official_keys
from cosyvoice_mac.models.llm.kv_cache import RotaryTable, StaticKVCache, apply_rope
from cosyvoice_mac.models.llm.step_kernels import PLAIN, StepKernels, norm_with


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
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "rms_norm_eps",
            "rope_theta",
            "vocab_size",
            "max_position_embeddings",
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


class Qwen2RMSNorm(nn.Module):
    """Owns the gain of one RMSNorm (statistics in float32, as the reference)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class Qwen2Attention(nn.Module):
    """Owns the fused q/k/v projection (with bias; official keys ``q_proj``/``k_proj``/``v_proj``)
    and the o projection (no bias) of one GQA self-attention layer."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        q_rows, kv_rows = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, q_rows + 2 * kv_rows, bias=True)
        self.o_proj = nn.Linear(q_rows, config.hidden_size, bias=False)
        fuse_official_keys(self, "qkv_proj", (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)))

    def _project(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) -> (B, T, H + 2·KVH, head_dim): rotated queries and keys, then values.

        ``rows``: the (cos, sin) pair, each (T, 1, head_dim), of :meth:`RotaryTable.rows`.
        """
        batch, steps, _ = x.shape
        qkv = self.qkv_proj(x).view(batch, steps, -1, self.head_dim)
        apply_rope(qkv.narrow(2, 0, self.num_heads + self.num_kv_heads), *rows)
        return qkv

    def _new_kv(self, qkv: torch.Tensor) -> torch.Tensor:
        """(2, B, KVH, T, head_dim) view of the new keys and values."""
        batch, steps = qkv.shape[:2]
        kv = qkv.narrow(2, self.num_heads, 2 * self.num_kv_heads)
        return kv.view(batch, steps, 2, self.num_kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def forward(self, x, rows, start: int, layer: int, cache: StaticKVCache | None) -> torch.Tensor:
        """x: (B, T, D) at positions ``start..start+T-1``; rows: their RoPE (cos, sin)."""
        batch, steps, _ = x.shape
        kv_heads, head_dim = self.num_kv_heads, self.head_dim
        group = self.num_heads // kv_heads
        qkv = self._project(x, rows)
        kv = self._new_kv(qkv)
        if cache is not None:
            cache.store(layer, cache.slots[start : start + steps], kv)
            keys, values = cache.span(layer, start + steps)
        else:
            keys, values = kv
        queries = qkv.narrow(2, 0, self.num_heads).transpose(1, 2)
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
    """Owns the SiLU-gated feed-forward projections of one layer: fused gate/up (official keys
    ``gate_proj``/``up_proj``) and down."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * size, bias=False)
        self.down_proj = nn.Linear(size, config.hidden_size, bias=False)
        fuse_official_keys(self, "gate_up_proj", (("gate_proj", size), ("up_proj", size)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        size = gate_up.shape[-1] // 2
        return self.down_proj(F.silu(gate_up.narrow(-1, 0, size)) * gate_up.narrow(-1, size, size))


class Qwen2DecoderLayer(nn.Module):
    """Owns one pre-norm transformer block: attention and MLP with their RMSNorms."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.self_attn = Qwen2Attention(config)
        self.mlp = Qwen2MLP(config)
        self.input_layernorm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, rows, start: int, layer: int, cache: StaticKVCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rows, start, layer, cache)
        return x + self.mlp(self.post_attention_layernorm(x))

    def step_plan(self, attend: Attend = F.scaled_dot_product_attention, kernels: StepKernels = PLAIN) -> LayerPlan:
        """What ``decode_step.decode_layer`` needs of this layer, looked up once per request; ``attend`` computes the
        one position's attention; ``kernels``: the step's projections, norms and SiLU * up (``step_kernels``)."""
        attention, mlp = self.self_attn, self.mlp
        project = functools.partial(projection, kernels=kernels)
        add = functools.partial(added_projection, kernels=kernels)
        return LayerPlan(
            norm_with(self.input_layernorm.eps, kernels),
            self.input_layernorm.weight,
            project(attention.qkv_proj),
            add(attention.o_proj),
            self.post_attention_layernorm.weight,
            project(mlp.gate_up_proj),
            add(mlp.down_proj),
            attention.num_heads,
            attention.num_kv_heads,
            attention.head_dim,
            attend,
            kernels.silu_mul,
        )


class Qwen2Model(nn.Module):
    """Owns the Qwen2 text embedding table, decoder layers and final norm (HF ``Qwen2Model`` keys)."""

    def __init__(self, config: Qwen2Config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryTable(config.head_dim, config.rope_theta, config.max_position_embeddings)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The final norm's dtype: the embedding table may be stored in 16 bits while the
        arithmetic stays float32 (see ``cosyvoice_mac.pipeline.precision``)."""
        return self.norm.weight.dtype

    def new_cache(self, capacity: int, batch_size: int = 1) -> StaticKVCache:
        """A cache for ``capacity`` positions on this model's device and compute dtype; the RoPE
        table is built for all of them now, so no decoding step rebuilds it."""
        weight = self.norm.weight
        cache = StaticKVCache(self.config, capacity, device=weight.device, dtype=weight.dtype, batch_size=batch_size)
        self.rotary.ensure(capacity, weight.device, weight.dtype)
        return cache

    def forward(self, inputs_embeds: torch.Tensor, cache: StaticKVCache | None = None) -> torch.Tensor:
        """inputs_embeds (B, T, D) -> final-RMSNorm hidden states (B, T, D).

        Without a cache the T positions are 0..T-1 with causal attention among them. With a cache
        they are ``cache.length..cache.length+T-1``, attend to every cached position, and are
        appended to the cache.
        """
        start = cache.length if cache is not None else 0
        steps = inputs_embeds.shape[1]
        if cache is not None:
            cache.check_room(steps)
        rows = self.rotary.rows(start, steps, inputs_embeds.device, inputs_embeds.dtype).unbind(1)
        hidden = inputs_embeds
        for index, layer in enumerate(self.layers):
            hidden = layer(hidden, rows, start, index, cache)
        if cache is not None:
            cache.length = start + steps
            cache.position.fill_(cache.length)
        return self.norm(hidden)

    def step_plan(self, attend: Attend = F.scaled_dot_product_attention, kernels: StepKernels = PLAIN) -> StepPlan:
        """Every layer's :class:`LayerPlan` and the final norm: build one per request (weights may move between
        requests); ``attend`` and ``kernels`` as for :meth:`Qwen2DecoderLayer.step_plan` (SDPA by ``kernels``)."""
        if attend is F.scaled_dot_product_attention:
            attend = kernels.attention
        return StepPlan([layer.step_plan(attend, kernels) for layer in self.layers], norm_with(self.norm.eps, kernels))

    def decode(
        self,
        embed: torch.Tensor,
        cache: StaticKVCache,
        span: int,
        bias: torch.Tensor | None = None,
        plan: StepPlan | None = None,
    ):
        """One decoding step (batch 1): embed (1, D) at ``cache.position`` -> final-norm hidden (1, D).

        Attends to cache slots ``0..span-1`` (``bias`` masks the unwritten ones) and advances
        ``cache.position`` in place; the host count ``cache.length`` is the caller's to advance
        (a CUDA graph replays this function without running its Python).
        """
        plan = self.step_plan() if plan is None else plan
        positions = cache.position
        rows = self.rotary.table.index_select(0, positions).unbind(1)
        hidden = embed.clone()  # the residual stream, added into in place (embed may be a row of the table)
        for index, layer_plan in enumerate(plan.layers):
            hidden = decode_layer(layer_plan, hidden, rows, positions, index, cache, span, bias)
        positions.add_(1)
        return plan.norm(hidden, self.norm.weight)
