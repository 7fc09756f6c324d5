"""The decoding-step guard's arithmetic: a tree's rounds summarised, and whether it is slower than a reference.

``bench/decode_guard.py`` times this tree and a reference (another tree in the same run, or a kept JSON of the
same machine) and asks :func:`verdict`. Interleaved rounds are compared pairwise (round i of this tree against
round i of the reference, which ran moments apart), so load that comes and goes on a shared machine cancels; a
kept JSON can only be compared by medians, and only on the machine and configuration it was measured on
(:func:`check_comparable`). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import statistics

DEFAULT_MARGIN = 0.10  # this tree may be at most 10 % slower a token than the reference
THIS, AGAINST = "this", "against"
# what a kept figure must share with a new run to be compared with it
CLOCKS = {"wall": ("ms_per_token", "ms"), "cpu": ("cpu_ms_per_token", "cpu_ms")}  # summary key, round key
COMPARABLE = ("machine", "torch", "device", "dtype", "version", "tokens", "threads")


class GuardError(ValueError):
    """A kept reference that cannot be compared with this run (another machine or configuration)."""


def summarise(rounds: list[dict]) -> dict:
    """One tree's rounds (each ``{"ms", "cpu_ms", "ids"}``, maybe ``prefill_ms``) -> medians, tokens per second and
    a digest of the ids."""
    if not rounds:
        raise GuardError("no rounds to summarise")
    ms = [r["ms"] for r in rounds]
    median = statistics.median(ms)
    ids = [r["ids"] for r in rounds]
    return {
        "ms_per_token": median,
        "tokens_per_s": 1e3 / median,
        "cpu_ms_per_token": statistics.median(r["cpu_ms"] for r in rounds),
        "prefill_ms": statistics.median(r.get("prefill_ms", 0.0) for r in rounds),  # the prompt's, not in ms_per_token
        "ms_runs": ms,
        "cpu_ms_runs": [r["cpu_ms"] for r in rounds],
        "ids_digest": hashlib.sha256(json.dumps(ids[0]).encode()).hexdigest()[:16],
        "ids_stable": all(each == ids[0] for each in ids),
    }


def verdict(
    this: dict,
    reference: dict,
    margin: float = DEFAULT_MARGIN,
    this_rounds: list[dict] | None = None,
    reference_rounds: list[dict] | None = None,
    clock: str = "wall",
) -> dict:
    """Whether ``this`` (a :func:`summarise` result) is within ``margin`` of ``reference``'s time per token.

    ``slowdown`` > 1 means this tree is slower, by ``clock``: ``wall`` (what a user waits), or ``cpu`` (the
    process's CPU time, which other programs on the cores disturb less: a shared machine's measure). With both
    trees' interleaved rounds it is the median of the per-round ratios; otherwise the ratio of the medians.
    """
    if margin < 0:
        raise GuardError(f"the margin is a fraction >= 0, not {margin}")
    if clock not in CLOCKS:
        raise GuardError(f"the clock is one of {', '.join(CLOCKS)}, not {clock!r}")
    median_key, round_key = CLOCKS[clock]
    ratios = {name: this[key] / reference[key] for name, (key, _) in CLOCKS.items()}
    paired = this_rounds and reference_rounds
    if paired:
        if len(this_rounds) != len(reference_rounds):
            raise GuardError("paired rounds must be as many for both trees")
        for name, (_, key) in CLOCKS.items():
            ratios[name] = statistics.median(a[key] / b[key] for a, b in zip(this_rounds, reference_rounds))
    slowdown = ratios[clock]
    return {
        "slowdown": slowdown,
        "clock": clock,
        "wall_slowdown": ratios["wall"],
        "cpu_slowdown": ratios["cpu"],
        "by_medians": this[median_key] / reference[median_key],
        "paired": bool(paired),
        "margin": margin,
        "passed": slowdown <= 1 + margin,
        "same_ids": this["ids_digest"] == reference["ids_digest"],
    }


def check_comparable(kept: dict, current: dict) -> None:
    """Raise :class:`GuardError` unless a kept run's configuration matches this one where it matters."""
    differing = [key for key in COMPARABLE if kept.get(key) != current.get(key)]
    if differing:
        detail = "; ".join(f"{key}: kept {kept.get(key)!r}, now {current.get(key)!r}" for key in differing)
        raise GuardError(f"the kept figure was measured elsewhere or otherwise ({detail}): compare against a tree")
