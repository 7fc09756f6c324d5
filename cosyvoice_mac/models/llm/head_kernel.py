"""The device sampler's ranked head as two Triton kernels (CUDA): the top k of the ranking keys, in rank order.

``DeviceRas._ranked_head`` ranks probabilities by unique int64 keys (a probability's bits above its reversed id).
ATen's ``topk`` selects them by radix passes over the key's 64 bits, one thread block for the whole row: 51 us a
token on the H200 for 6761 keys, 4 % of a fused step (two stages of chunks: 41 us; bench/README.md, "Session 10").
Here each program of one warp holds 256 keys in registers and takes the largest ``top_k`` times (a warp-wide max,
then that key knocked out), and a second program does the same over their heads: the same keys in the same order,
since no two are equal (one program over all 6761 keys took 23 us: block-wide maxima synchronise every warp).
Used where Triton and a CUDA tensor are at hand and the sizes fit (``fits``); ATen's topk stays everywhere else.
As a ``triton_op`` it is a kernel that torch.compile keeps inside the fused step and pick.
"""

from __future__ import annotations

import torch

CHUNK = 256  # keys a first-stage program ranks (one warp, 8 keys a thread)
MAX_VOCAB = 16384  # the second stage then holds at most 64 x top_k keys
MAX_TOP_K = 64

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU wheels (and a Mac) have no Triton: DeviceRas keeps ATen's topk there
    triton = None


def fits(probs: torch.Tensor, top_k: int) -> bool:
    """Whether :func:`ranked_head_keys` serves ``probs`` (V,): Triton present, CUDA, top_k <= MAX_TOP_K,
    V <= MAX_VOCAB."""
    sizes = top_k <= MAX_TOP_K and top_k <= probs.numel() <= MAX_VOCAB
    return triton is not None and probs.is_cuda and probs.dim() == 1 and sizes


if triton is not None:

    @triton.jit
    def _take_largest(keys, out_ptr, TOP_K: tl.constexpr):
        """Store the TOP_K largest of the unique ``keys`` at out_ptr, largest first."""
        for rank in tl.static_range(TOP_K):
            best = tl.max(keys, axis=0)
            tl.store(out_ptr + rank, best)
            keys = tl.where(keys == best, -1, keys)

    @triton.jit
    def _chunk_heads_kernel(probs_ptr, heads_ptr, vocab, ID_BITS: tl.constexpr, TOP_K: tl.constexpr, CHUNK: tl.constexpr):
        """Program c: the TOP_K largest keys of ids c*CHUNK .. (c+1)*CHUNK-1 (-1 where the chunk has fewer)."""
        chunk = tl.program_id(0)
        ids = chunk * CHUNK + tl.arange(0, CHUNK)
        valid = ids < vocab
        probs = tl.load(probs_ptr + ids, mask=valid, other=0.0)
        bits = probs.to(tl.int32, bitcast=True).to(tl.int64)
        keys = tl.where(valid, (bits << ID_BITS) | ((1 << ID_BITS) - 1 - ids).to(tl.int64), -1)
        _take_largest(keys, heads_ptr + chunk * TOP_K, TOP_K)

    @triton.jit
    def _head_of_heads_kernel(heads_ptr, out_ptr, count, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        keys = tl.load(heads_ptr + offsets, mask=offsets < count, other=-1)
        _take_largest(keys, out_ptr, TOP_K)

    @torch.library.triton_op("cosyvoice_mac::ranked_head_keys", mutates_args=())
    def ranked_head_keys(probs: torch.Tensor, top_k: int, id_bits: int) -> torch.Tensor:
        """probs (V,) float32, non-negative -> the ``top_k`` largest keys ``bits(p) << id_bits | (2**id_bits - 1 -
        id)`` (top_k,) int64, largest first (``keys.topk(top_k).values`` bit for bit): each chunk's head, then the
        head of those (the keys are unique, so the head of the chunks' heads is the head)."""
        chunks = triton.cdiv(probs.numel(), CHUNK)
        heads = torch.empty(chunks * top_k, dtype=torch.long, device=probs.device)
        out = torch.empty(top_k, dtype=torch.long, device=probs.device)
        torch.library.wrap_triton(_chunk_heads_kernel)[(chunks,)](
            probs, heads, probs.numel(), ID_BITS=id_bits, TOP_K=top_k, CHUNK=CHUNK, num_warps=1
        )
        block = triton.next_power_of_2(chunks * top_k)
        torch.library.wrap_triton(_head_of_heads_kernel)[(1,)](
            heads, out, chunks * top_k, TOP_K=top_k, BLOCK=block, num_warps=max(1, block // 1024)
        )
        return out
