"""The checks that need no recogniser: what the samples alone say about a take (N,) float32.

Each returns plain-worded problems ("a silence of 2.1 s inside the take"), empty when the take is fine. They
run on the pipeline's raw sentence audio, before any post-processing. Numpy only (cpu-only: a finished take
is already on the host)."""

from __future__ import annotations

import numpy as np

from cosyvoice_mac.pipeline.takes import thresholds as limits
from cosyvoice_mac.pipeline.takes.text_match import CHARACTER_LANGUAGES

NOISE = "it sounds like noise, not speech"


def frame_rms(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """(F,) RMS of consecutive FRAME_S frames (the tail shorter than a frame dropped)."""
    size = max(1, round(limits.FRAME_S * sample_rate))
    count = len(audio) // size
    frames = audio[: count * size].reshape(count, size)
    return np.sqrt(np.mean(np.square(frames), axis=1))


def loud_level(rms: np.ndarray) -> float:
    """The take's loud frames' level: the 95th percentile, so a click does not set it."""
    return float(np.percentile(rms, 95)) if rms.size else 0.0


def unusable(audio: np.ndarray) -> str | None:
    """Why the take holds no usable sound at all (non-finite, empty or silent), else None."""
    if audio.size == 0:
        return "the take is empty"
    if not np.isfinite(audio).all():
        return "the take holds invalid samples (NaN or infinity)"
    if float(np.abs(audio).max()) < limits.SILENT_PEAK:
        return "the take is silent"
    return None


REPEATED_STRETCH = "a stretch of audio is repeated"


def sound_problems(audio: np.ndarray, sample_rate: int) -> list[str]:
    """A long silence inside the take, an ending cut off mid-sound, noise instead of speech, a looped copy."""
    rms = frame_rms(audio, sample_rate)
    loud = loud_level(rms)
    if loud <= 0.0:
        return []
    voiced = rms > loud * 10 ** (-limits.QUIET_FRAME_DB / 20)
    features = frame_spectra(audio, sample_rate)
    if voiced.any() and float(np.median(flatness(features)[voiced[: len(features)]])) > limits.MAX_SPEECH_FLATNESS:
        return [NOISE]  # its silences and its ending say nothing about speech
    problems = []
    longest = longest_inner_silence(voiced) * limits.FRAME_S
    if longest > limits.MAX_INNER_SILENCE_S:
        problems.append(f"a silence of {longest:.1f} s inside the take")
    end = audio[-max(1, round(limits.END_WINDOW_S * sample_rate)) :]
    if float(np.sqrt(np.mean(np.square(end)))) > limits.MAX_END_LOUDNESS * loud:
        problems.append("the ending is cut off")
    if looped_copy(features, voiced):
        problems.append(REPEATED_STRETCH)
    return problems


def longest_inner_silence(voiced: np.ndarray) -> int:
    """The longest run of quiet frames between the first and the last voiced frame."""
    where = np.flatnonzero(voiced)
    if where.size < 2:
        return 0
    return int(np.diff(where).max()) - 1


def frame_spectra(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """(F, bins) power spectra of the FRAME_S frames (Hann window)."""
    size = max(2, round(limits.FRAME_S * sample_rate))
    count = len(audio) // size
    frames = audio[: count * size].reshape(count, size) * np.hanning(size).astype(np.float32)
    return np.square(np.abs(np.fft.rfft(frames, axis=1))) + 1e-12


def flatness(spectra: np.ndarray) -> np.ndarray:
    """(F,) spectral flatness: geometric over arithmetic mean of each frame's power (1: white noise)."""
    return np.exp(np.mean(np.log(spectra), axis=1)) / np.mean(spectra, axis=1)


def looped_copy(spectra: np.ndarray, voiced: np.ndarray) -> bool:
    """Whether a stretch of REPEAT_MIN_S or more comes back almost identical later (a copied loop): along each lag,
    a run of frame pairs that match (quiet pairs between words count as matching) of which half are voiced."""
    run = round(limits.REPEAT_MIN_S / limits.FRAME_S)
    count = len(spectra)
    if count < 2 * run:
        return False
    bands = np.log(spectra[:, : spectra.shape[1] // 32 * 32].reshape(count, 32, -1).mean(axis=2))
    bands = (bands[:-2] + bands[1:-1] + bands[2:]) / 3  # over 60 ms: a copy need not start on a frame's edge
    sounding = voiced[1 : count - 1]
    # the voice's average colour would make every frame look alike; averaged over the voiced frames only, or a
    # long silence drags the mean down until every voiced frame looks like every other
    bands -= bands[sounding].mean(axis=0) if sounding.any() else bands.mean(axis=0)
    bands /= np.linalg.norm(bands, axis=1, keepdims=True) + 1e-9
    both = sounding[:, None] & sounding[None, :]
    similar = bands @ bands.T > limits.REPEAT_SIMILARITY
    for lag in range(run, len(bands) - run + 1):
        voiced_match = np.diagonal(similar & both, lag)
        if voiced_match.sum() >= run // 2 and _longest_match(voiced_match, np.diagonal(both, lag), run):
            return True
    return False


def _longest_match(voiced_match: np.ndarray, both_voiced: np.ndarray, run: int) -> bool:
    """A window of ``run`` pairs in which REPEAT_WINDOW_AGREEMENT of the pairs match or are not both voiced, and
    half are voiced matches (a copy's frames fall a little off the original's, so a few pairs miss)."""
    agree = np.concatenate(([0], np.cumsum(voiced_match | ~both_voiced)))
    matches = np.concatenate(([0], np.cumsum(voiced_match)))
    agreeing = (agree[run:] - agree[:-run]) >= limits.REPEAT_WINDOW_AGREEMENT * run
    return bool(np.any(agreeing & ((matches[run:] - matches[:-run]) >= run // 2)))


def duration_bounds(
    unit_count: int,
    language: str | None,
    speed: float = 1.0,
    learned_seconds_per_unit: float | None = None,
    text_tokens: int | None = None,
    token_rate: float | None = None,
) -> tuple[float, float]:
    """(shortest, longest) seconds a take of ``unit_count`` units may last: the speaking-rate bounds, narrowed to
    the voice's learned rate when known, and capped where the model must have stopped (its token rate and
    ``MAX_SPEECH_TOKENS_PER_TEXT_TOKEN`` times the text's ``text_tokens``)."""
    if language in CHARACTER_LANGUAGES:
        fastest, slowest = limits.MAX_CHARACTERS_PER_SECOND, limits.MIN_CHARACTERS_PER_SECOND
    else:
        fastest, slowest = limits.MAX_WORDS_PER_SECOND, limits.MIN_WORDS_PER_SECOND
    shortest, longest = unit_count / fastest, unit_count / slowest
    if learned_seconds_per_unit:
        expected = unit_count * learned_seconds_per_unit
        shortest = max(shortest, expected / limits.LEARNED_RATE_FACTOR)
        longest = min(longest, expected * limits.LEARNED_RATE_FACTOR)
    if text_tokens and token_rate:
        longest = min(longest, text_tokens * limits.MAX_SPEECH_TOKENS_PER_TEXT_TOKEN / token_rate)
    shortest = max(0.0, shortest / speed - limits.DURATION_SLACK_S)
    return shortest, longest / speed + limits.DURATION_SLACK_S


def duration_problem(duration_s: float, bounds: tuple[float, float]) -> str | None:
    """Why a take of ``duration_s`` seconds is too short or too long for its text, else None."""
    shortest, longest = bounds
    if duration_s < shortest:
        return f"too short for the text ({duration_s:.1f} s, expected at least {shortest:.1f} s): words dropped?"
    if duration_s > longest:
        return f"too long for the text ({duration_s:.1f} s, expected at most {longest:.1f} s)"
    return None
