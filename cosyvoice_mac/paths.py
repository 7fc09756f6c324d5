"""Where the app keeps its per-user files (speaker cache, saved voices, recogniser models). Torch-free."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_NAME = "cosyvoice-mac"


def user_cache_dir() -> Path:
    """$COSYVOICE_CACHE_DIR, else ~/Library/Caches/cosyvoice-mac (macOS), else $XDG_CACHE_HOME
    (or ~/.cache)/cosyvoice-mac."""
    configured = os.environ.get("COSYVOICE_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / APP_NAME
