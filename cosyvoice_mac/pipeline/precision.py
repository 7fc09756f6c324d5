"""Per-stage precision: keep the LLM's weight matrices in 16 bits while its arithmetic stays float32.

A CPU without bf16/fp16 matrix units (x86 without AVX512-BF16/AMX) multiplies 16-bit matrices
about ten times slower than float32 ones, so "bf16 on the CPU" would slow the flow down. What
pays is *storing* the LLM's weights in 16 bits: decoding reads every weight once per token, so
it is limited by memory traffic, and half the bytes is half the memory (what an 8 GB Mac needs)
and, where the 16-bit matrix-vector kernel keeps up with memory, up to twice the tokens per second.

:class:`HalfStoredLinear` owns one such weight. A single-row input (one decoding step) takes
ATen's 16-bit matrix-vector product straight from the stored weight; a many-row input (the
prefill) widens the weight for that one product, which costs little next to the product itself.
State-dict keys are unchanged (``weight``, ``bias``). Measured alternatives are in bench/README.md.
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


def halved_modules(module: nn.Module, keep: tuple[str, ...] = ()) -> set[int]:
    """ids of the submodules whose weight :func:`store_weights_in_half` stores in 16 bits.

    Every ``nn.Linear`` and the big text embedding, except those whose qualified name starts with
    a ``keep`` prefix (layers whose weight dtype the model code reads as its compute dtype).
    """
    chosen = set()
    for name, child in module.named_modules():
        if any(name == prefix or name.startswith(prefix + ".") for prefix in keep):
            continue
        if isinstance(child, nn.Linear) or (
            isinstance(child, nn.Embedding) and child.num_embeddings >= BIG_EMBEDDING_ROWS
        ):
            chosen.add(id(child))
    return chosen


def store_weights_in_half(
    module: nn.Module, storage: torch.dtype, compute: torch.dtype = torch.float32, keep: tuple[str, ...] = ()
) -> int:
    """Swap the linear layers (and the big text embedding) of ``module`` for 16-bit-stored ones.

    ``keep`` names layers to leave alone (see :func:`halved_modules`). Weights already in
    ``storage`` are kept as they are (no copy); others are converted one at a time. Returns the
    number of bytes the swap saved.
    """
    if storage not in HALF_DTYPES:
        raise ValueError(f"weights can be stored as float16 or bfloat16, not {storage}")
    return _swap_layers(
        module,
        keep,
        lambda weight, bias: HalfStoredLinear(weight.to(storage), bias),
        lambda table: HalfStoredEmbedding(table.to(storage), compute),
        compute,
    )


def _swap_layers(module: nn.Module, keep: tuple[str, ...], make_linear, make_table, compute: torch.dtype) -> int:
    """Replace each layer :func:`halved_modules` chooses: linears by ``make_linear(weight, bias)``, the big
    embedding by ``make_table(weight)``. Returns the bytes saved."""
    chosen = halved_modules(module, keep)
    saved = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if id(child) not in chosen:
                continue
            weight = child.weight.detach()
            if isinstance(child, nn.Linear):
                bias = None if child.bias is None else child.bias.detach().to(compute)
                replacement = make_linear(weight, bias)
            else:
                replacement = make_table(weight)
            saved += _tensor_bytes(child) - _tensor_bytes(replacement)
            setattr(parent, name, replacement)
    return saved


# weight-only int8 -----------------------------------------------------------------------------
INT8 = "int8"  # the LLM's weight-only int8 choice (not a torch dtype: activations stay floating point)
INT8_ACTIVATIONS = torch.bfloat16  # the fused kernel's fast input on x86 (fp32/fp16 inputs measured 6-7x slower)
_FUSED_INT8: dict[str, bool] = {}  # device type -> whether ATen's int8 weight kernel runs there
FUSED_INT8_K_MULTIPLE = 32  # torch 2.13's CPU kernel returns nan/inf (or crashes) for other inner sizes


QUANTIZE_ROWS = 4096  # rows widened at a time: the 151 936-row text table never exists in float32 at once


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight (N, K)`` -> (int8 ``(N, K)``, float32 scale ``(N,)``): symmetric, one scale per output row."""
    quantized = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, weight.shape[0], QUANTIZE_ROWS):
        rows = weight[start : start + QUANTIZE_ROWS].float()
        row_scale = rows.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127.0
        quantized[start : start + QUANTIZE_ROWS] = torch.round(rows / row_scale[:, None]).clamp(-127, 127)
        scale[start : start + QUANTIZE_ROWS] = row_scale
    return quantized, scale


def fused_int8_runs_on(device: torch.device) -> bool:
    """Whether ``aten._weight_int8pack_mm`` runs on ``device``'s type (CPU and MPS have it; checked once)."""
    if device.type not in _FUSED_INT8:
        try:
            row = torch.ones(1, 32, device=device, dtype=INT8_ACTIVATIONS)
            torch.ops.aten._weight_int8pack_mm(
                row,
                torch.ones(8, 32, device=device, dtype=torch.int8),
                torch.ones(8, device=device, dtype=INT8_ACTIVATIONS),
            )
            _FUSED_INT8[device.type] = True
        except (RuntimeError, NotImplementedError):
            _FUSED_INT8[device.type] = False
    return _FUSED_INT8[device.type]


class Int8WeightLinear(nn.Module):
    """Owns a linear layer's weight as int8 with one scale per output channel, and its bias.

    ``forward(x (..., K)) -> (..., N)`` in ``x``'s dtype. A single row (one decoding step) runs
    ATen's fused int8 matrix-vector kernel where the device has one, reading 1 byte a weight (a
    quarter of float32); many rows (the prefill) widen the weight to ``x``'s dtype for that product.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        quantized, scale = quantize_per_channel(weight)
        self.register_buffer("qweight", quantized)
        self.register_buffer("scale", scale)
        self.register_buffer("kernel_scale", scale.to(INT8_ACTIVATIONS))
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.fused = self.in_features % FUSED_INT8_K_MULTIPLE == 0

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight ``(N, K)`` widened to ``dtype`` (one temporary copy)."""
        return self.qweight.to(dtype) * self.scale[:, None].to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == self.in_features and self.fused and fused_int8_runs_on(x.device):
            row = x.reshape(1, -1).to(INT8_ACTIVATIONS)
            out = torch.ops.aten._weight_int8pack_mm(row, self.qweight, self.kernel_scale)
            out = out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        else:
            out = F.linear(x, self.dequantized(x.dtype))
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, stored=int8 per-channel"


def store_weights_in_int8(module: nn.Module, compute: torch.dtype = torch.float32, keep: tuple[str, ...] = ()) -> int:
    """Swap every ``nn.Linear`` of ``module`` (whatever its name or shape) for an :class:`Int8WeightLinear`.

    The big text embedding becomes an :class:`Int8Embedding` (memory only: a lookup reads one row).
    Weights already rounded to 16 bits are quantised from those values. Returns the bytes saved.
    """
    return _swap_layers(module, keep, Int8WeightLinear, lambda table: Int8Embedding(table, compute), compute)


class Int8Embedding(nn.Module):
    """Owns an embedding table as int8 with one scale per row; lookups come back in ``compute_dtype``.

    ``forward(ids (...)) -> (..., D)``. The Qwen2 text table: 272 MB in fp16, 136 MB here.
    """

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype):
        super().__init__()
        quantized, scale = quantize_per_channel(weight)
        self.register_buffer("qweight", quantized)
        self.register_buffer("scale", scale)
        self.compute_dtype = compute_dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(ids, self.qweight).to(self.compute_dtype)
        return rows * F.embedding(ids, self.scale[:, None]).to(self.compute_dtype)


def _tensor_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
