"""Operations written as plain matrix products where CUDA's float32 kernel for them is slow.

Each computes what the operation it replaces means (the same numbers up to rounding); the networks call the
plain operation everywhere else.
"""

from __future__ import annotations

import torch
from torch import nn


def attend_by_products(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None):
    """One position's attention as two batched products and a softmax (what SDPA means, written out).

    queries (1, KVH, G, hd): the G query heads sharing each KV head; keys, values (1, KVH, S, hd); bias (1, S) or
    None -> (1, KVH, G, hd). For CUDA at float32, where SDPA's only kernel (memory-efficient attention, 64-query
    tiles) runs one thread block per KV head here: 30 us a layer on an H200, 0.71 of a token's 1.83 ms of GPU time.
    """
    scores = torch.matmul(queries * queries.shape[-1] ** -0.5, keys.transpose(-1, -2))
    if bias is not None:
        scores = scores + bias
    return torch.matmul(scores.softmax(dim=-1), values)


def grouped_conv1d(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` on CUDA: cuDNN takes an FFT algorithm for the DiT's fp32 grouped k=31 conv, ~13 ms a call on an
    H200, 3/4 of the first streamed chunk's GPU time (bench/flow_kernels.py); as matrix products, well under 1 ms."""
    return grouped_conv1d_as_matmul(x, conv) if x.dtype == torch.float32 else conv(x)


def grouped_conv1d_as_matmul(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """``conv(x)`` for a grouped, unpadded, stride-1 ``conv``, computed as one batched matrix product over
    its input windows. ``x (B, C, L)`` -> ``(B, C_out, L - k + 1)``."""
    batch, channels, length = x.shape
    groups, kernel = conv.groups, conv.kernel_size[0]
    frames, group_in = length - kernel + 1, channels // groups
    windows = x.unfold(2, kernel, 1).unflatten(1, (groups, group_in))  # (B, G, C/G, T, k)
    windows = windows.permute(0, 1, 3, 2, 4).reshape(batch, groups, frames, group_in * kernel)
    weight = conv.weight.reshape(groups, -1, group_in * kernel)  # (G, C_out/G, C/G k)
    out = torch.matmul(windows, weight.transpose(1, 2))  # (B, G, T, C_out/G)
    out = out.permute(0, 1, 3, 2).reshape(batch, -1, frames)
    return out if conv.bias is None else out + conv.bias[:, None]
