"""The speech LM's one-position decoding step, written flat: what a layer needs, looked up once per request.

At batch 1 the Python around a step's operations costs as much as they do, so :meth:`Qwen2Model.step_plan`
gathers each layer's weights and projections into a :class:`LayerPlan` once per request, and
:func:`decode_layer` runs one position through a layer on 2-D activations with no module lookups. The
operations themselves come from a ``step_kernels.StepKernels`` set (plain ATen by default).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from cosyvoice_mac.models.llm.kv_cache import StaticKVCache, apply_rope
from cosyvoice_mac.models.llm.step_kernels import PLAIN, StepKernels

# (queries, keys, values, bias or None) -> attended: one decoded position's attention (see decode_layer)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
# (x, weight) -> RMSNorm of x over its last dimension, eps bound (see step_kernels.norm_with)
Norm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def projection(module: nn.Module, kernels: StepKernels = PLAIN) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` as a callable: a plain, hook-free ``nn.Linear`` becomes ``kernels.linear`` (``F.linear``) bound to
    its weights (half the CPU overhead of a module call); anything else (a 16-bit-stored or quantised replacement, a
    hooked layer) is called as the module it is."""
    hooked = module._forward_hooks or module._forward_pre_hooks or _global_forward_hooks or _global_forward_pre_hooks
    if type(module) is nn.Linear and not hooked:
        return functools.partial(kernels.linear, weight=module.weight, bias=module.bias)
    return module


def added_projection(
    module: nn.Module, kernels: StepKernels = PLAIN
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(x (1, in), residual (1, out)) -> residual + module(x)``; for a plain, hook-free, bias-free ``nn.Linear`` one
    ``addmm_`` that adds into ``residual`` in place (one kernel, not two: bench/README.md, "Session 10"), so the
    caller must own it; ``kernels`` as for :func:`projection`."""
    linear = projection(module, kernels)
    if isinstance(linear, functools.partial) and linear.keywords["bias"] is None:
        return functools.partial(kernels.linear_added, weight=linear.keywords["weight"])
    return lambda x, residual: residual + linear(x)


class LayerPlan(NamedTuple):
    """One decoder layer's weights and projections as plain fields (no module lookups per step)."""

    norm: Norm
    input_norm: torch.Tensor
    qkv_proj: Callable[[torch.Tensor], torch.Tensor]
    o_proj: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, residual) -> residual + o_proj(x)
    post_norm: torch.Tensor
    gate_up_proj: Callable[[torch.Tensor], torch.Tensor]
    down_proj: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, residual) -> residual + down_proj(x)
    heads: int
    kv_heads: int
    head_dim: int
    attend: Attend
    silu_mul: Callable[[torch.Tensor], torch.Tensor]  # gate_up (1, 2I) -> SiLU(gate) * up (1, I)


def decode_layer(plan: LayerPlan, x, rows, positions, layer: int, cache: StaticKVCache, span: int, bias):
    """One position x (1, D) at ``positions`` (1,) through one layer -> (1, D); 13 operations (the residual adds
    ride on their projections, into x itself where they can: the caller owns x).

    Written flat (batch 1, 2-D activations, no module attribute lookups) because at this size the
    Python around the operations costs as much as they do. Attends to cache slots ``0..span-1``;
    ``bias`` (1, span) is added to the scores (-inf on slots not yet written), or None when
    ``span`` is exactly the filled length. The query heads that share a KV head are laid out as
    that head's "query rows", so K/V are never repeated; ``plan.attend`` attends (SDPA, or what the
    decoding runner picks).
    """
    heads, kv_heads, head_dim = plan.heads, plan.kv_heads, plan.head_dim
    qkv = plan.qkv_proj(plan.norm(x, plan.input_norm)).view(1, -1, head_dim)
    apply_rope(qkv.narrow(1, 0, heads + kv_heads), *rows)
    cache.store(layer, positions, qkv.narrow(1, heads, 2 * kv_heads).view(2, 1, kv_heads, 1, head_dim))
    keys, values = cache.span(layer, span)
    queries = qkv.narrow(1, 0, heads).view(1, kv_heads, -1, head_dim)
    attended = plan.attend(queries, keys, values, bias)
    x = plan.o_proj(attended.reshape(1, -1), x)  # reshape: CUDA's fp32 kernel may return it non-contiguous
    return plan.down_proj(plan.silu_mul(plan.gate_up_proj(plan.norm(x, plan.post_norm))), x)


class StepPlan(NamedTuple):
    """A decoding step's :class:`LayerPlan` per layer and the final norm (:meth:`Qwen2Model.step_plan`)."""

    layers: list[LayerPlan]
    norm: Norm
