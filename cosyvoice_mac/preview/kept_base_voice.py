"""The preview's base-voice statistics, kept in the user cache folder between processes.

Measuring them means speaking a 6.5 s reference with the base voice and analysing it with WORLD: ~1.3 s of one
core's CPU at every start of a preview worker (on the 2-core AMD EPYC, 2026-12-07), to get the same 17 rows of
numbers each time. They are found again by what decides them: the speaker's identity (its graph, config and
packages), the reference text and the analysis code. A file that cannot be read, or holds anything but the rows
expected, is measured again and replaced, as if nothing were kept.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Callable

import numpy as np

from cosyvoice_mac import paths
from cosyvoice_mac.preview import world_convert

KEEP_VERSION = 1  # bump when what is kept, or how it is measured, changes outside world_convert.py


def kept_path(speaker_identity: str, text: str, conversion_version: int) -> Path:
    """Where the statistics of ``text`` spoken by that speaker are kept; world_convert's own source is part
    of the name, so any change to the analysis measures them again."""
    digest = hashlib.sha256(f"{KEEP_VERSION}|{conversion_version}|{speaker_identity}|{text}|".encode())
    digest.update(Path(world_convert.__file__).read_bytes())
    return paths.user_cache_dir() / "preview" / f"base-voice-{digest.hexdigest()[:24]}.npy"


def kept_or_measured(
    path: Path | None, measure: Callable[[], world_convert.BaseVoiceModel]
) -> world_convert.BaseVoiceModel:
    """The statistics kept at ``path``, else ``measure()``'s, then kept there (``path`` None: measured only).
    A read-only or full cache folder only means measuring again next time."""
    if path is not None:
        try:
            return world_convert.BaseVoiceModel.from_rows(np.load(path, allow_pickle=False))
        except (OSError, EOFError, ValueError):  # missing, empty, unreadable or not the rows
            pass
    model = measure()
    if path is not None:
        buffer = io.BytesIO()
        np.save(buffer, model.to_rows(), allow_pickle=False)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            paths.atomic_write(path, buffer.getvalue())
        except OSError:
            pass
    return model
