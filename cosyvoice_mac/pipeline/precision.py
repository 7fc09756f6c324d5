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

import threading

import torch
import torch.nn.functional as F
from torch import nn

HALF_DTYPES = (torch.float16, torch.bfloat16)
BIG_EMBEDDING_ROWS = 100_000  # only the Qwen2 text table (151 936 rows) is worth halving


class _RowKernel:
    """Chooses how one activation row meets a 16-bit weight, once per process.

    ``compiled``: an inductor kernel per weight shape that widens each weight element in
    registers (float32 activations, float32 sums); ``eager``: ATen's half GEMV (the row rounded
    to the weight's dtype, float32 sums inside). The compiled one is used when torch.compile
    works here (it needs a C++ compiler); otherwise the eager one, with no error.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._compiled: dict[tuple, object] = {}
        self.mode = "compiled"

    def __call__(self, row: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``row (1, K)`` float, ``weight (N, K)`` 16-bit -> ``(1, N)`` in ``row``'s dtype."""
        if self.mode == "compiled" and weight.device.type == "cpu":
            key = (weight.dtype, row.dtype, *weight.shape)
            kernel = self._compiled.get(key)
            if kernel is None:
                with self._lock:
                    kernel = self._compiled.setdefault(key, _compile_row_kernel(key))
            try:
                return kernel(row, weight.detach())
            except Exception:  # no compiler, unsupported platform: fall back for good
                self.mode = "eager"
        out = F.linear(row.to(weight.dtype), weight).to(row.dtype)
        if weight.dtype == torch.float16 and not bool(torch.isfinite(out).all()):
            out = F.linear(row, weight.to(row.dtype))  # an activation beyond fp16's range: redo widened
        return out


_KERNEL_SOURCE = """
def row_times_weight(row, weight):
    return (weight.float() * row.float()).sum(-1, keepdim=True).transpose(0, 1).to(row.dtype)
"""


def _compile_row_kernel(key: tuple):
    # A fresh code object per weight shape: dynamo caches compiled graphs per code object and
    # gives up after a few shapes, while a static shape per kernel is what makes it fast.
    namespace: dict = {}
    exec(compile(_KERNEL_SOURCE, f"<row kernel {key}>", "exec"), namespace)  # noqa: S102 - our own source
    return torch.compile(namespace["row_times_weight"], dynamic=False, fullgraph=True)


ROW_KERNEL = _RowKernel()


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
            out = ROW_KERNEL(x.reshape(1, -1), self.weight).reshape(*x.shape[:-1], self.out_features)
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
