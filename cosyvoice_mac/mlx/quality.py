"""How much a reduced-precision MLX LLM changes what the sampler can pick: top-k agreement with fp32.

The RAS sampler draws among at most ``top_k`` = 25 candidates, so a precision is harmless where the
25 most likely speech ids stay the same set. ``top_k_agreement`` compares two ``(L, V)`` logit (or
log-prob) tensors position by position.
"""

from __future__ import annotations

import torch

TOP_K = 25


def top_k_agreement(reference: torch.Tensor, candidate: torch.Tensor, k: int = TOP_K) -> dict:
    """``(L, V)`` x 2 -> mean and worst share of the reference's top-k ids that the candidate also ranks
    top-k, and the share of positions with the same top-1 id."""
    if reference.shape != candidate.shape or reference.dim() != 2:
        raise ValueError(
            f"need two (L, V) tensors of one shape, got {tuple(reference.shape)} and {tuple(candidate.shape)}"
        )
    ours = reference.float().topk(k, dim=-1).indices
    theirs = candidate.float().topk(k, dim=-1).indices
    shared = (ours[:, :, None] == theirs[:, None, :]).any(-1).float().mean(-1)  # (L,)
    return {
        "k": k,
        "positions": int(reference.shape[0]),
        "mean": float(shared.mean()),
        "worst": float(shared.min()),
        "top1_same": float((ours[:, 0] == theirs[:, 0]).float().mean()),
    }
