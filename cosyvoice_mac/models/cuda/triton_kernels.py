"""Two Triton kernels for the CUDA decoding step, each computing bit for bit what the ATen operations it replaces do.

**The device sampler's ranked head** (:func:`ranked_head_keys`). ``DeviceRas._ranked_head`` ranks probabilities by
unique int64 keys (a probability's bits above its reversed id). ATen's ``topk`` selects them by radix passes over
the key's 64 bits, one thread block for the whole row: 51 us a token on the H200 for 6761 keys, 4 % of a fused step
(two stages of chunks: 41 us; bench/README.md, "Session 10"). Here each program of one warp holds 256 keys in
registers and takes the largest ``top_k`` times (a warp-wide max, then that key knocked out: 5 us for all 27
programs), and one program sorts their heads (27 x 25 keys for 6761, bitonic): the same keys in the same order,
since no two are equal. (Measured and left: one 16-warp program over all 6761 keys, 23 us, block-wide maxima
synchronising every warp; the heads' head by a one-warp program, 29 us; ATen's sort of the heads, 28 us, a radix
sort for int64.)

**SiLU(gate) * up** (:func:`silu_mul`) for the step that keeps eager's rounding (``eager_kernels``): inductor's
fused SiLU takes Triton's fast exp and parts from eager's tokens, so that step ran ATen's SiLU and a separate product
(24 more kernels a token). This kernel computes what ATen's CUDA kernels do: ``g / (1 + expf(-g))`` in float32 with
CUDA's own ``expf`` (libdevice's) and an IEEE division, rounded to the 16-bit type, then the product in float32,
rounded (checked on the H200 against ATen for every 16-bit value of the gate).

Used where Triton and CUDA tensors are at hand (``fits``, ``silu_mul_fits``); ATen stays everywhere else. As
``triton_op`` they are kernels that torch.compile keeps inside the fused step.
"""

from __future__ import annotations

import torch

CHUNK = 256  # keys a first-stage program ranks (one warp, 8 keys a thread)
MAX_VOCAB = 8192  # the sort then holds at most 32 x top_k keys
MAX_TOP_K = 64

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # the CPU wheels (and a Mac) have no Triton: ATen's operations run there
    triton = None

ELEMENTS_PER_PROGRAM = 128  # silu_mul: 38 programs for the model's 4864 (1024 a program: 5 of them, 2 us)


def fits(probs: torch.Tensor, top_k: int) -> bool:
    """Whether :func:`ranked_head_keys` serves ``probs`` (V,): Triton present, CUDA, top_k <= MAX_TOP_K,
    V <= MAX_VOCAB."""
    sizes = top_k <= MAX_TOP_K and top_k <= probs.numel() <= MAX_VOCAB
    return triton is not None and probs.is_cuda and probs.dim() == 1 and sizes


def silu_mul_fits(gate_up: torch.Tensor) -> bool:
    """Whether :func:`silu_mul` serves ``gate_up``: Triton present, CUDA, contiguous (N, 2I)."""
    return triton is not None and gate_up.is_cuda and gate_up.dim() == 2 and gate_up.is_contiguous()


if triton is not None:

    @triton.jit
    def _take_largest(keys, out_ptr, TOP_K: tl.constexpr):
        """Store the TOP_K largest of the unique ``keys`` at out_ptr, largest first."""
        for rank in tl.static_range(TOP_K):
            best = tl.max(keys, axis=0)
            tl.store(out_ptr + rank, best)
            keys = tl.where(keys == best, -1, keys)

    @triton.jit
    def _chunk_heads_kernel(
        probs_ptr, heads_ptr, vocab, ID_BITS: tl.constexpr, TOP_K: tl.constexpr, CHUNK: tl.constexpr
    ):
        """Program c: the TOP_K largest keys of ids c*CHUNK .. (c+1)*CHUNK-1 (-1 where the chunk has fewer)."""
        chunk = tl.program_id(0)
        ids = chunk * CHUNK + tl.arange(0, CHUNK)
        valid = ids < vocab
        probs = tl.load(probs_ptr + ids, mask=valid, other=0.0)
        bits = probs.to(tl.int32, bitcast=True).to(tl.int64)
        keys = tl.where(valid, (bits << ID_BITS) | ((1 << ID_BITS) - 1 - ids).to(tl.int64), -1)
        _take_largest(keys, heads_ptr + chunk * TOP_K, TOP_K)

    @triton.jit
    def _sorted_head_kernel(heads_ptr, out_ptr, count, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        """The TOP_K largest of ``count`` keys, largest first: one program's bitonic sort of all of them."""
        offsets = tl.arange(0, BLOCK)
        keys = tl.sort(tl.load(heads_ptr + offsets, mask=offsets < count, other=-1), descending=True)
        tl.store(out_ptr + offsets, keys, mask=offsets < TOP_K)

    @torch.library.triton_op("cosyvoice_mac::ranked_head_keys", mutates_args=())
    def ranked_head_keys(probs: torch.Tensor, top_k: int, id_bits: int) -> torch.Tensor:
        """probs (V,) float32, non-negative -> the ``top_k`` largest keys ``bits(p) << id_bits | (2**id_bits - 1 -
        id)`` (top_k,) int64, largest first (``keys.topk(top_k).values`` bit for bit): each chunk's head, then those
        sorted (the keys are unique, so the head of the chunks' heads is the head)."""
        chunks = triton.cdiv(probs.numel(), CHUNK)
        heads = torch.empty(chunks * top_k, dtype=torch.long, device=probs.device)
        out = torch.empty(top_k, dtype=torch.long, device=probs.device)
        torch.library.wrap_triton(_chunk_heads_kernel)[(chunks,)](
            probs, heads, probs.numel(), ID_BITS=id_bits, TOP_K=top_k, CHUNK=CHUNK, num_warps=1
        )
        torch.library.wrap_triton(_sorted_head_kernel)[(1,)](
            heads, out, chunks * top_k, TOP_K=top_k, BLOCK=triton.next_power_of_2(chunks * top_k), num_warps=4
        )
        return out

    @triton.jit
    def _silu_mul_kernel(gate_up_ptr, out_ptr, total, inner, BLOCK: tl.constexpr):
        """out[r, c] = round(round(silu(gate[r, c])) * up[r, c]) with gate = gate_up[r, :inner], up the rest."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        valid = offsets < total
        row, column = offsets // inner, offsets % inner
        gate = tl.load(gate_up_ptr + row * 2 * inner + column, mask=valid, other=0.0).to(tl.float32)
        up = tl.load(gate_up_ptr + row * 2 * inner + inner + column, mask=valid, other=0.0).to(tl.float32)
        silu = tl.div_rn(gate, 1.0 + libdevice.exp(-gate)).to(out_ptr.dtype.element_ty)  # ATen rounds SiLU's output
        tl.store(out_ptr + offsets, (silu.to(tl.float32) * up).to(out_ptr.dtype.element_ty), mask=valid)

    @torch.library.triton_op("cosyvoice_mac::silu_mul", mutates_args=())
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up (N, 2I) contiguous -> F.silu(gate) * up (N, I), gate and up its halves, as ATen rounds them."""
        inner = gate_up.shape[1] // 2
        out = gate_up.new_empty((gate_up.shape[0], inner))
        total = out.numel()
        torch.library.wrap_triton(_silu_mul_kernel)[(triton.cdiv(total, ELEMENTS_PER_PROGRAM),)](
            gate_up, out, total, inner, BLOCK=ELEMENTS_PER_PROGRAM, num_warps=4
        )
        return out
