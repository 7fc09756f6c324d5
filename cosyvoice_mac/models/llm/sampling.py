"""Choosing the next speech token from the LM's log-probabilities.

:class:`RasSampler` is CosyVoice's ``ras_sampling`` (repetition-aware sampling from VALL-E 2):
a nucleus/top-k draw, re-drawn from the full distribution when the id already occurred in the
recent window. It always runs on the CPU in float32 with its own seeded ``torch.Generator``, so a
request is reproducible on every device and independent of the global RNG. The random draw is a
replaceable function ``draw(probs_1d, kind) -> index`` so tests can replay recorded draws.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

NUCLEUS = "nucleus"  # draw among the nucleus/top-k candidates (probs in descending order)
FULL = "full"  # repetition fallback: draw over the whole vocabulary

DrawFn = Callable[[torch.Tensor, str], int]


def _masked_copy(logp: torch.Tensor, ignore_ids: Sequence[int]) -> torch.Tensor:
    """A float32 CPU copy of ``logp`` (V,) with ``ignore_ids`` set to -inf (the caller's tensor is untouched)."""
    scores = logp.detach().float().cpu()
    scores = scores.clone() if scores.data_ptr() == logp.data_ptr() else scores
    if len(ignore_ids):
        scores[torch.as_tensor(list(ignore_ids), dtype=torch.long)] = float("-inf")
    return scores


class RasSampler:
    """Owns one request's sampling settings and random generator (repetition-aware sampling).

    ``__call__(logp (V,), history, ignore_ids) -> id``:

    1. ``ignore_ids`` get probability 0 (the LM passes its stop ids while ``step < min_len``).
    2. ``p = softmax(logp / temperature)`` (1: the model's own; upstream has none), sorted descending
       (stable). Item i joins the candidates while the
       summed probability of the items before it is ``< top_p`` and fewer than ``top_k`` joined
       (float32 running sum, as the reference). One candidate is drawn in proportion to ``p``.
    3. If the drawn id occurs ``>= win_size * tau_r`` times in the last ``win_size`` emitted ids,
       it gets probability 0 and the id is re-drawn from the full distribution.
    """

    def __init__(
        self,
        *,
        top_p: float = 0.8,
        top_k: int = 25,
        win_size: int = 10,
        tau_r: float = 0.1,
        temperature: float = 1.0,
        seed: int | None = None,
        draw: DrawFn | None = None,
    ):
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        if win_size < 1 or tau_r < 0:
            raise ValueError(f"win_size must be at least 1 and tau_r not negative, got {win_size}, {tau_r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.win_size = win_size
        self.tau_r = tau_r
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        self.draw: DrawFn = draw if draw is not None else self._multinomial

    def _multinomial(self, probs: torch.Tensor, kind: str) -> int:
        return int(torch.multinomial(probs, 1, replacement=True, generator=self.generator))

    def nucleus_size(self, sorted_probs: torch.Tensor) -> int:
        """How many of the descending ``sorted_probs`` are candidates (at least one)."""
        head = sorted_probs[: self.top_k].numpy()
        mass_before = np.cumsum(head, dtype=np.float32)[:-1]  # sequential float32 sums, as upstream
        # Running sums never decrease, so the candidates are a prefix: the first item plus every
        # item whose predecessors' mass is still below top_p (compared in float32 like torch).
        return 1 + int(np.count_nonzero(mass_before < np.float32(self.top_p)))

    def __call__(self, logp: torch.Tensor, history: Sequence[int], ignore_ids: Sequence[int] = ()) -> int:
        scores = _masked_copy(logp, ignore_ids)
        if self.temperature != 1.0:
            scores = scores / self.temperature
        probs = torch.softmax(scores, dim=0)
        sorted_probs, sorted_ids = probs.sort(descending=True, stable=True)
        return self._choose(scores, sorted_probs, sorted_ids, history)

    def _choose(self, scores, sorted_probs: torch.Tensor, sorted_ids: torch.Tensor, history: Sequence[int]) -> int:
        """Steps 2 (the draw among the candidates) and 3 (the repetition re-draw) from the descending probabilities
        (at least the first ``top_k``, with their ids) and the scores they came from (a float32 CPU copy)."""
        count = self.nucleus_size(sorted_probs)
        token = int(sorted_ids[self.draw(sorted_probs[:count], NUCLEUS)])
        window = list(history[-self.win_size :])
        if window.count(token) >= self.win_size * self.tau_r:
            scores[token] = float("-inf")
            token = self.draw(torch.softmax(scores, dim=0), FULL)
        return token


def sample_rows(
    samplers: Sequence, logps: torch.Tensor, histories: Sequence[Sequence[int]], ignores: Sequence[Sequence[int]]
) -> list[int]:
    """Row ``i``'s id from ``samplers[i](logps[i], histories[i], ignores[i])``, the same ids, with the per-row work
    done once for the batch where every sampler is a :class:`RasSampler`: one softmax and one top-k over ``logps``
    ``(B, V)`` instead of a sort of the whole vocabulary per row (which a batch of lines paid every step). The
    top-k's candidates are put in the stable sort's order (probability descending, lower id first on ties); a row
    whose last candidate ties with an id left out falls back to the full sort, so ties resolve exactly as alone."""
    if not all(type(sampler) is RasSampler for sampler in samplers):
        return [int(s(row, history, ignore)) for s, row, history, ignore in zip(samplers, logps, histories, ignores)]
    scores = logps.detach().float().cpu()  # our own copy: rows are masked and re-drawn in place
    scores = scores.clone() if scores.data_ptr() == logps.data_ptr() else scores
    for row, ignore in enumerate(ignores):
        if len(ignore):
            scores[row, torch.as_tensor(list(ignore), dtype=torch.long)] = float("-inf")
    for row, sampler in enumerate(samplers):
        if sampler.temperature != 1.0:
            scores[row] = scores[row] / sampler.temperature  # as the sampler divides its own row
    probs = torch.softmax(scores, dim=1)
    keep = min(max(sampler.top_k for sampler in samplers), probs.shape[1])
    top_probs, top_ids = probs.topk(keep, dim=1)
    by_id = top_ids.sort(dim=1).indices  # ids ascending, then a stable sort by probability: the full sort's order
    top_probs, top_ids = top_probs.gather(1, by_id), top_ids.gather(1, by_id)
    order = top_probs.sort(dim=1, descending=True, stable=True).indices
    top_probs, top_ids = top_probs.gather(1, order), top_ids.gather(1, order)
    # a row whose last candidate's probability is also an id's left out: the tie crosses the cut
    last = top_probs[:, -1:]
    crossing = ((probs == last).sum(1) != (top_probs == last).sum(1)).tolist() if keep < probs.shape[1] else ()
    tokens = []
    for row, sampler in enumerate(samplers):
        sorted_probs, sorted_ids = top_probs[row], top_ids[row]
        if crossing and crossing[row]:
            sorted_probs, sorted_ids = probs[row].sort(descending=True, stable=True)
        tokens.append(sampler._choose(scores[row], sorted_probs, sorted_ids, histories[row]))
    return tokens


class GreedySampler:
    """Stateless argmax choice (first maximum on ties), honouring ``ignore_ids``."""

    def __call__(self, logp: torch.Tensor, history: Sequence[int], ignore_ids: Sequence[int] = ()) -> int:
        return int(torch.argmax(_masked_copy(logp, ignore_ids)))
