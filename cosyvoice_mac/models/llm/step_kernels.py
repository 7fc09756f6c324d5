"""The decoding step's kernels as one swappable set: the plain ATen functions every device runs.

:class:`StepKernels` names what the flat decoding step (``decode_step.decode_layer``) calls for its projections,
norms, attention, SiLU * up and log-softmax. :data:`PLAIN` is what runs on the CPU, MPS and CUDA by default;
a torch.compile'd step at 16 bits swaps in the set that keeps eager's rounding
(``cosyvoice_mac.models.cuda.eager_kernels.EAGER_ROUNDING``, chosen by the decoding runner).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F


def plain_linear_added(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """residual (N, out) += x (N, in) @ weight (out, in).T, in place, and returned: one ``addmm_``, whose epilogue adds
    (out of place ATen first copies the residual into the output: another kernel)."""
    return residual.addmm_(x, weight.t())


def plain_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rms_norm(x, weight.shape, weight, eps)


def plain_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (N, 2I) -> SiLU(gate) * up (N, I): the MLP's gate, gate and up its halves."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def plain_float_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.float().log_softmax(dim=-1)


class StepKernels(NamedTuple):
    """The operations a decoding step calls (each with the plain function's signature)."""

    linear: Callable  # (x, weight, bias) -> F.linear
    linear_added: Callable  # (x, residual, weight) -> residual += x @ weight.T, returned
    rms_norm: Callable  # (x, weight, eps) -> RMSNorm of x over its last dimension
    attention: Callable  # (queries, keys, values, bias or None) -> SDPA with bias as its additive mask
    silu_mul: Callable  # gate_up (N, 2I) -> SiLU(gate) * up (N, I)
    log_softmax: Callable  # logits (..., V) -> float32 log-probabilities


PLAIN = StepKernels(
    linear=F.linear,
    linear_added=plain_linear_added,
    rms_norm=plain_rms_norm,
    attention=F.scaled_dot_product_attention,
    silu_mul=plain_silu_mul,
    log_softmax=plain_float_log_softmax,
)


def norm_with(eps: float, kernels: StepKernels = PLAIN):
    """(x, weight) -> RMSNorm of x with ``eps``, by ``kernels``."""
    return functools.partial(kernels.rms_norm, eps=eps)


def few_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` for a few rows x (B, in), computed as weight (out, in) @ x.T: a CPU's BLAS then streams the weight
    once for all rows, where ``F.linear``'s small-M product first packs it (measured on the 2-core EPYC, one thread,
    the MLP's 9728x896 float32 gate-up weight: B=4 cost 3.2x a row through ``F.linear``, 1.5x this way)."""
    out = torch.mm(weight, x.t()) if bias is None else torch.addmm(bias[:, None], weight, x.t())
    return out.t().contiguous()


def few_rows_linear_added(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """residual (B, out) += x (B, in) @ weight.T in place, as :func:`few_rows_linear` computes it."""
    return residual.add_(torch.mm(weight, x.t()).t())


# A batch of a few lines decoding on a CPU (``models/llm/batch_decoding.py``): the same step, projections that read
# each weight once for every row.
FEW_ROWS_ON_CPU = PLAIN._replace(linear=few_rows_linear, linear_added=few_rows_linear_added)
