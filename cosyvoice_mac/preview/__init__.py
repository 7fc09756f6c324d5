"""The offline preview engine (Piper / espeak-ng + WORLD conversion toward the prompt voice).

Import :class:`PreviewVoice` from ``cosyvoice_mac.preview.backend`` (it loads torch and Piper lazily);
this package's ``labels`` module holds the strings the UI shows and imports nothing heavy.
"""

from cosyvoice_mac.preview.labels import (  # noqa: F401
    BACKEND_LICENSES,
    DOWNLOAD_COMMAND,
    LICENSE_NOTE,
    PREVIEW_EXPLANATION,
    PREVIEW_LABEL,
    PREVIEW_NOTE,
)

PIPELINE_FACTORY = "cosyvoice_mac.preview.backend:PreviewVoice.from_pretrained"  # for WorkerConfig.pipeline_factory
