"""The offline preview engine (Piper / espeak-ng + WORLD conversion toward the prompt voice).

Import :class:`PreviewVoice` from ``cosyvoice_mac.preview.backend`` (it loads torch and Piper lazily);
this package's ``labels`` module holds the strings the UI shows and imports nothing heavy.
"""

import importlib.util

from cosyvoice_mac.preview.labels import (  # noqa: F401
    BACKEND_LICENSES,
    DOWNLOAD_COMMAND,
    LICENSE_NOTE,
    PREVIEW,
    PREVIEW_EXPLANATION,
    PREVIEW_LABEL,
    PREVIEW_NOTE,
)

PIPELINE_FACTORY = "cosyvoice_mac.preview.backend:PreviewVoice.from_pretrained"  # for WorkerConfig.pipeline_factory
PREVIEW_MODULES = ("piper", "pyworld")


def preview_available() -> bool:
    """True when the preview voice's packages are installed (found, not imported: Piper is slow to load)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in PREVIEW_MODULES)
    except (ImportError, ValueError):
        return False
