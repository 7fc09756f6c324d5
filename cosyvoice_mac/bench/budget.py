"""A benchmark run that fits a time budget: how long a request may be after the warm-up has shown the speed.

``bash run.sh doctor`` gives each engine a share of five minutes. The warm-up request (25 speech tokens,
not streamed) is timed anyway; its seconds per token, which include the first call's kernel loads and so
over-estimate, say how many tokens the timed request can decode in what is left. A slow engine (MLX's CPU
backend on Linux takes minutes for a second of speech) gets a shorter request, then no streamed first-audio
figures, and at the slowest the warm-up itself stands as the measured run, its figures cold. Each shortening
is said in the report, and the doctor's table repeats it.
"""

from __future__ import annotations

from dataclasses import dataclass

WARM_UP_TOKENS = 25  # one second of speech: the shortest request the benchmark times
FIRST_AUDIO_TOKENS = 25  # each first-audio figure decodes about one chunk's tokens before its audio
FIRST_AUDIO_RUNS = 2  # a voice used before and a new one


@dataclass(frozen=True)
class RunPlan:
    """What the timed request is: ``tokens`` decoded, ``stream`` (first-audio figures), or none at all
    (``warm_up_only``: the warm-up's figures stand); ``shortened`` says why it is less than was asked."""

    tokens: int
    stream: bool
    warm_up_only: bool = False
    shortened: str | None = None


def estimated_seconds(seconds_per_token: float, tokens: int, stream: bool) -> float:
    """A request's seconds: its tokens through every stage, and each streamed first audio's chunk."""
    return seconds_per_token * (tokens + stream * FIRST_AUDIO_RUNS * min(tokens, FIRST_AUDIO_TOKENS))


def plan_run(tokens: int, stream: bool, seconds_per_token: float, seconds_left: float | None) -> RunPlan:
    """The longest request up to ``tokens`` (in whole seconds of speech below it) that fits ``seconds_left``,
    streamed if asked and it fits; no budget (None) runs what was asked."""
    if seconds_left is None or estimated_seconds(seconds_per_token, tokens, stream) <= seconds_left:
        return RunPlan(tokens, stream)
    pace = f"{seconds_per_token:.2f} s a token in the warm-up, {max(seconds_left, 0):.0f} s of the budget left"
    lengths = [tokens, *range((tokens - 1) // WARM_UP_TOKENS * WARM_UP_TOKENS, WARM_UP_TOKENS - 1, -WARM_UP_TOKENS)]
    for streamed in (True, False) if stream else (False,):
        for length in lengths:
            if estimated_seconds(seconds_per_token, length, streamed) <= seconds_left:
                said = f"{length} of {tokens} tokens" + ("" if streamed == stream else ", no first-audio figures")
                return RunPlan(length, streamed, shortened=f"{said} ({pace})")
    return RunPlan(
        min(tokens, WARM_UP_TOKENS),
        False,
        warm_up_only=True,
        shortened="the warm-up is the measured run (cold: first-call costs included)"
        + (", no first-audio figures" if stream else "")
        + f" ({pace})",
    )
