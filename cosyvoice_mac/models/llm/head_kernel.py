"""The device sampler's ranked head as one Triton kernel (CUDA): the top k of the ranking keys, in rank order.

``DeviceRas._ranked_head`` ranks probabilities by unique int64 keys (a probability's bits above its reversed id).
ATen's ``topk`` selects them by radix passes over the key's 64 bits, one thread block for the whole row: 51 us a
token on the H200 for 6761 keys, 4 % of a fused step (two stages of chunks: 41 us; bench/README.md, "Session 10").
Here one program holds every key in registers and takes the largest ``top_k`` times (each a block-wide max,
then that key knocked out): the same keys in the same order, since no two are equal. Used where Triton and a
CUDA tensor are at hand and the vocabulary fits one program (``fits``); the ATen path stays everywhere else.
As a ``triton_op`` it is a kernel that torch.compile keeps inside the fused step and pick.
"""

from __future__ import annotations

import torch

MAX_VOCAB = 8192  # keys held by one program (16 warps, 16 keys a thread)

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU wheels (and a Mac) have no Triton: DeviceRas keeps ATen's topk there
    triton = None


def fits(probs: torch.Tensor, top_k: int) -> bool:
    """Whether :func:`ranked_head_keys` serves ``probs`` (V,): Triton present, CUDA, V <= MAX_VOCAB."""
    return triton is not None and probs.is_cuda and probs.dim() == 1 and top_k <= probs.numel() <= MAX_VOCAB


if triton is not None:

    @triton.jit
    def _ranked_head_kernel(probs_ptr, out_ptr, vocab, ID_BITS: tl.constexpr, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        ids = tl.arange(0, BLOCK)
        valid = ids < vocab
        probs = tl.load(probs_ptr + ids, mask=valid, other=0.0)
        bits = probs.to(tl.int32, bitcast=True).to(tl.int64)
        keys = tl.where(valid, (bits << ID_BITS) | ((1 << ID_BITS) - 1 - ids).to(tl.int64), -1)
        for rank in tl.static_range(TOP_K):
            best = tl.max(keys, axis=0)
            tl.store(out_ptr + rank, best)
            keys = tl.where(keys == best, -1, keys)

    @torch.library.triton_op("cosyvoice_mac::ranked_head_keys", mutates_args=())
    def ranked_head_keys(probs: torch.Tensor, top_k: int, id_bits: int) -> torch.Tensor:
        """probs (V,) float32, non-negative -> the ``top_k`` largest keys ``bits(p) << id_bits | (2**id_bits - 1 -
        id)`` (top_k,) int64, largest first (``keys.topk(top_k).values`` bit for bit)."""
        out = torch.empty(top_k, dtype=torch.long, device=probs.device)
        block = triton.next_power_of_2(probs.numel())
        torch.library.wrap_triton(_ranked_head_kernel)[(1,)](
            probs, out, probs.numel(), ID_BITS=id_bits, TOP_K=top_k, BLOCK=block, num_warps=16
        )
        return out
