"""A benchmark run that fits a time budget: how long a request may be after the warm-up has shown the speed.

``bash run.sh doctor`` gives each engine a share of five minutes. The warm-up request (25 speech tokens,
not streamed) is timed anyway; its seconds per token say how many tokens the timed request can decode in what
is left. They include the first call's one-off costs (kernel loads, CUDA graph captures, compiles: 55 s of an
H100's first 25 tokens, which then decode at 630 a second), so a warm-up whose pace would shorten the run is
timed again where the budget holds a second one or the device is a GPU (``worth_timing_again``), and the
faster pace plans the run.
A slow engine (MLX's CPU backend on Linux takes minutes for a second of speech) gets a shorter request, then
no streamed first-audio figures, and at the slowest a warm-up itself stands as the measured run. Each
shortening is said in the report, and the doctor's table repeats it.
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


def worth_timing_again(plan: RunPlan, warm_up_s: float, seconds_left: float | None, on_a_gpu: bool) -> bool:
    """Whether to time the warm-up again before planning with its pace: the first one's pace shortens the run
    (its one-off costs may be all that was slow), and what is left holds another as long as the first, or the
    device is a GPU (CUDA, MPS), whose first call is mostly kernel loads and graph captures that the second
    skips. A CPU's first call costs about what the second does: there a second that cannot fit is not tried,
    so a slow CPU engine keeps its cold figures instead of being stopped for its time."""
    if plan.shortened is None or seconds_left is None or seconds_left <= 0:
        return False
    return on_a_gpu or seconds_left >= warm_up_s


def plan_run(
    tokens: int, stream: bool, seconds_per_token: float, seconds_left: float | None, timed_again: bool = False
) -> RunPlan:
    """The longest request up to ``tokens`` (in whole seconds of speech below it) that fits ``seconds_left``,
    streamed if asked and it fits; no budget (None) runs what was asked. ``timed_again``: the pace is the
    second warm-up's (the one that would stand as the run), not the first call's."""
    if seconds_left is None or estimated_seconds(seconds_per_token, tokens, stream) <= seconds_left:
        return RunPlan(tokens, stream)
    warm_up = "the second warm-up" if timed_again else "the warm-up"
    pace = f"{seconds_per_token:.2f} s a token in {warm_up}, {max(seconds_left, 0):.0f} s of the budget left"
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
        shortened=(
            "the second warm-up is the measured run"
            if timed_again
            else "the warm-up is the measured run (cold: first-call costs included)"
        )
        + (", no first-audio figures" if stream else "")
        + f" ({pace})",
    )
