"""The decoding step's projections, norms, SDPA, SiLU and log-softmax as operations torch.compile cannot open.

torch.compile's fused decoding step rounds differently from the eager step at 16 bits, and the
sampled tokens part after a few (measured on an H200 at fp16 by ``bench/fused_rounding.py``: 14 %
of a layer's attention inputs and 30 % of its MLP outputs not bit-equal). Inductor rewrites
matrix products (``mm`` + add into ``addmm``, whose epilogue adds before rounding, and back), reduces
RMSNorm and the log-softmax in its own order, computes SiLU's exp with Triton's fast one, fuses SDPA's
math backend, and keeps a fused chain's intermediates in float32. As custom operations these are black
boxes to inductor: it calls them as eager does (the same cuBLAS call, the same kernels; on CUDA SiLU * up
is a Triton kernel that rounds as ATen's two do, ``triton_kernels``) and fuses only the exact elementwise
work between them (RoPE, the cache write, the sampler's pick), which its ``emulate_precision_casts``
setting rounds as eager does. Measured at fp16: every piece of a layer bit-equal to eager's, and 250
sampled tokens equal to eager decoding's (bench/README.md, "Session 10"). The decoding runner uses these
(:data:`EAGER_ROUNDING`) where its step is compiled at 16 bits (``DecodeOptions.eager_rounding``); elsewhere
``step_kernels.PLAIN`` runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cosyvoice_mac.models.cuda import triton_kernels
from cosyvoice_mac.models.llm.step_kernels import StepKernels


@torch.library.custom_op(
    "cosyvoice_mac::linear", mutates_args=(), schema="(Tensor x, Tensor weight, Tensor? bias) -> Tensor"
)
def linear(x, weight, bias):
    """``F.linear`` (x (..., in), weight (out, in), bias (out,) or None -> (..., out)) that inductor does not open."""
    return F.linear(x, weight, bias)


@linear.register_fake
def _linear_shape(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op(
    "cosyvoice_mac::add_linear_",
    mutates_args=("residual",),
    schema="(Tensor x, Tensor(a!) residual, Tensor weight) -> ()",
)
def add_linear_(x, residual, weight):
    """residual += x @ weight.T in place, as ``addmm_`` (``step_kernels.plain_linear_added``), unopened by inductor."""
    residual.addmm_(x, weight.t())


@add_linear_.register_fake
def _add_linear_shape(x, residual, weight):
    return None


def linear_added(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``step_kernels.plain_linear_added`` through the opaque :func:`add_linear_`."""
    add_linear_(x, residual, weight)
    return residual


@torch.library.custom_op(
    "cosyvoice_mac::rms_norm", mutates_args=(), schema="(Tensor x, Tensor weight, float eps) -> Tensor"
)
def rms_norm(x, weight, eps):
    """``torch.rms_norm`` over the last dimension (x (..., D), weight (D,)) that inductor does not open."""
    return torch.rms_norm(x, weight.shape, weight, eps)


@rms_norm.register_fake
def _rms_norm_shape(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("cosyvoice_mac::silu", mutates_args=(), schema="(Tensor x) -> Tensor")
def silu(x):
    """``F.silu`` that inductor does not open (its Triton exp rounds a 16-bit SiLU otherwise than eager's, rarely)."""
    return F.silu(x)


@silu.register_fake
def _silu_shape(x):
    return torch.empty_like(x)


@torch.library.custom_op(
    "cosyvoice_mac::attention",
    mutates_args=(),
    schema="(Tensor queries, Tensor keys, Tensor values, Tensor? bias) -> Tensor",
)
def attention(queries, keys, values, bias):
    """``F.scaled_dot_product_attention`` (bias as its additive mask) that inductor does not open: where SDPA takes
    its math backend (a head size no fused kernel takes) inductor would otherwise fuse the softmax in its own order."""
    return F.scaled_dot_product_attention(queries, keys, values, bias).contiguous()


@attention.register_fake
def _attention_shape(queries, keys, values, bias):
    return queries.new_empty((*queries.shape[:-1], values.shape[-1]))


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``step_kernels.plain_silu_mul`` that inductor does not open: one Triton kernel on CUDA (ATen's rounding, see
    :mod:`triton_kernels`), elsewhere the opaque :func:`silu` times up."""
    if triton_kernels.silu_mul_fits(gate_up):
        return triton_kernels.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return silu(gate) * up


@torch.library.custom_op("cosyvoice_mac::float_log_softmax", mutates_args=(), schema="(Tensor logits) -> Tensor")
def float_log_softmax(logits):
    """logits (..., V) of any float dtype -> float32 log-probabilities over the last dimension, not opened."""
    return logits.float().log_softmax(dim=-1)


@float_log_softmax.register_fake
def _float_log_softmax_shape(logits):
    return torch.empty_like(logits, dtype=torch.float32)


# The step that keeps eager's rounding under torch.compile (``DecodeOptions.eager_rounding``).
EAGER_ROUNDING = StepKernels(
    linear=linear,
    linear_added=linear_added,
    rms_norm=rms_norm,
    attention=attention,
    silu_mul=silu_mul,
    log_softmax=float_log_softmax,
)
