"""Per-stage precision: keep big weight matrices in 16 bits while the arithmetic stays float32.

A CPU without bf16/fp16 matrix units (x86 without AVX512-BF16/AMX) multiplies 16-bit matrices
about ten times slower than float32 ones, so "bf16 on the CPU" would slow the flow down. What
does pay everywhere is *storing* the weights in 16 bits: the LLM reads every weight once per
token, so its speed is memory bandwidth / weight bytes, and half the bytes is up to twice the
tokens per second (and half the memory, which is what an 8 GB Mac needs).

:class:`HalfStoredLinear` owns one such weight. A single-row input (one decoding step) takes a
matrix-vector product straight from the 16-bit weight; a many-row input (prefill, the flow)
widens the weight to the input's dtype for that one product, which costs little next to the
matrix multiply itself. State-dict keys are unchanged (``weight``, ``bias``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

HALF_DTYPES = (torch.float16, torch.bfloat16)
BIG_EMBEDDING_ROWS = 100_000  # only the Qwen2 text table (151 936 rows) is worth halving


def half_row_product(row: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``row (1, K)`` float32 times a 16-bit ``weight (N, K)`` -> ``(1, N)`` float32.

    ATen's half GEMV reads the weight once at 2 bytes a value and sums in float32; the row is
    rounded to the weight's dtype for the product. A row whose product leaves fp16's range is
    redone with the weight widened (rare: it costs one reduction to check).
    """
    out = F.linear(row.to(weight.dtype), weight).to(row.dtype)
    if weight.dtype == torch.float16 and not bool(torch.isfinite(out).all()):
        out = F.linear(row, weight.to(row.dtype))
    return out




class HalfStoredLinear(nn.Module):
    """Owns a linear layer's weight stored as fp16/bf16 and its bias in the compute dtype.

    ``forward(x (..., K)) -> (..., N)`` in ``x``'s dtype.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        if weight.dtype not in HALF_DTYPES:
            raise ValueError(f"HalfStoredLinear stores fp16/bf16 weights, got {weight.dtype}")
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype:
            return F.linear(x, self.weight, self.bias)
        if x.numel() == self.in_features and x.device.type == "cpu":
            out = half_row_product(x.reshape(1, -1), self.weight).reshape(*x.shape[:-1], self.out_features)
        else:
            out = F.linear(x, self.weight.to(x.dtype))
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, stored={self.weight.dtype}"


class HalfStoredEmbedding(nn.Module):
    """Owns an embedding table stored as fp16/bf16; lookups come back in ``compute_dtype``.

    ``forward(ids (...)) -> (..., D)``.
    """

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.compute_dtype = compute_dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight).to(self.compute_dtype)


def store_weights_in_half(module: nn.Module, storage: torch.dtype, compute: torch.dtype = torch.float32) -> int:
    """Swap every ``nn.Linear`` (and the big text embedding) of ``module`` for a 16-bit-stored one.

    Tensors already in ``storage`` are kept as they are (no copy); others are converted one at a
    time. Returns the number of bytes the swap saved.
    """
    if storage not in HALF_DTYPES:
        raise ValueError(f"weights can be stored as float16 or bfloat16, not {storage}")
    saved = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                weight = child.weight.detach()
                bias = None if child.bias is None else child.bias.detach().to(compute)
                saved += weight.numel() * (weight.element_size() - torch.finfo(storage).bits // 8)
                setattr(parent, name, HalfStoredLinear(weight.to(storage), bias))
            elif isinstance(child, nn.Embedding) and child.num_embeddings >= BIG_EMBEDDING_ROWS:
                weight = child.weight.detach()
                saved += weight.numel() * (weight.element_size() - torch.finfo(storage).bits // 8)
                setattr(parent, name, HalfStoredEmbedding(weight.to(storage), compute))
    return saved
