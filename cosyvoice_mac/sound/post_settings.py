"""What is done to every finished waveform before it is saved, as the request contract carries it (the work is
``post.py``'s). Its own module so the contract (``request.py``) stays one idea a file; torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.settings import bounds

LUFS_RANGE = bounds("loudness_lufs")  # the settings table says why


@dataclass(frozen=True)
class PostSettings:
    """What is done to a finished waveform before it is saved (both off by default): ``trim`` its leading
    and trailing silence, normalise its integrated loudness to ``loudness_lufs`` (None: leave it).

    The same value serves every output (Generate, the APIs, ``synth``, dialogue, subtitles, batches);
    ``sound/post.py`` does the work. Checked when built, like ``Request``.
    """

    trim: bool = False
    loudness_lufs: float | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise RequestError naming the field ("trim" or "loudness_lufs"); the only place these rules are."""
        if not isinstance(self.trim, bool):
            raise RequestError("trim", "trim_invalid", f"trim must be true or false, not {self.trim!r}")
        target, (low, high) = self.loudness_lufs, LUFS_RANGE
        if target is None:
            return
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
            raise RequestError(
                "loudness_lufs",
                "loudness_invalid",
                f"the loudness target must be a number of LUFS from {low:g} to {high:g}, not {target!r}",
                low=low,
                high=high,
            )
        if not low <= target <= high:
            raise RequestError(
                "loudness_lufs",
                "loudness_invalid",
                f"the loudness target must be {low:g} to {high:g} LUFS (got {target:g}); "
                "-16 suits speech on the web, -23 broadcast",
                low=low,
                high=high,
            )

    @property
    def active(self) -> bool:
        return self.trim or self.loudness_lufs is not None

    def as_dict(self) -> dict:
        return {"trim": self.trim, "loudness_lufs": self.loudness_lufs}
