"""What a streamed conversion must sound like next to the same conversion made whole: chunk by chunk, the same
wave within a tolerance. Streaming is not bit-exact by design (the flow's early chunks see only their own
chunk of tokens, as upstream's), so the check is the shape and the level of each chunk, not its samples: a
chunk scaled, silenced or taken from elsewhere fails it, the chunked attention does not."""

from __future__ import annotations

import numpy as np

# Measured on the tiny random CosyVoice3 (PyTorch and MLX): per-chunk correlation 0.66-0.95 (the first, 10-token
# chunk lowest), level 0.82-1.03 of the whole conversion's; CosyVoice2's chunks correlate 0.99. A silenced chunk
# has no level and no correlation at all.
MIN_CORRELATION = 0.5
LEVEL_RANGE = (0.7, 1.4)


def rms(wave: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(wave, dtype=np.float64))))


def assert_streams_like(chunks: list[np.ndarray], whole: np.ndarray, min_correlation: float = MIN_CORRELATION) -> None:
    """Each of ``chunks`` (the streamed audio, in order) against the same span of ``whole`` (the conversion
    made at once): as long in all, not silent, correlated and at the same level."""
    assert sum(len(chunk) for chunk in chunks) == len(whole)
    assert rms(whole) > 1e-3, "the whole conversion is silent: nothing to compare the stream with"
    start = 0
    for index, chunk in enumerate(chunks):
        span = whole[start : start + len(chunk)]
        start += len(chunk)
        if len(chunk) < 480 or rms(span) < 1e-3:  # a sliver, or a pause: no shape to compare
            continue
        level = rms(chunk) / rms(span)
        assert LEVEL_RANGE[0] <= level <= LEVEL_RANGE[1], f"chunk {index} is at {level:.2f} of the whole's level"
        correlation = float(np.corrcoef(chunk, span)[0, 1])
        assert correlation >= min_correlation, f"chunk {index} correlates {correlation:.2f} with the whole"
