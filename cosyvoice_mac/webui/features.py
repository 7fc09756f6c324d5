"""Optional controls: each is on only when the code and model it needs are really there.

The layout asks ``detect_features()`` once; a control is built only when its flag is True, so a
missing optional part leaves no broken button behind. The flags, and where their controls slot in:

* ``asr``: speech recognition can fill the prompt transcript (``cosyvoice_mac.frontend.asr`` imports,
  faster-whisper is installed and a model is on disk). Its button belongs next to the transcript field;
  it should run ``asr.transcribe`` outside the UI process (that module loads torch).
* ``stream``: a "Stream" toggle that plays EVENT_PROGRESS audio chunks as they arrive.
* ``preview_backend``: a label naming the backend of a preview run (``cosyvoice_mac.preview.labels``).
* ``vocoder_select``: a vocoder menu (torch / Core ML with compute units).

Only ``asr`` is detected so far; the controls themselves are later work.
"""
from __future__ import annotations

import importlib
import importlib.util

FEATURES = ("asr", "stream", "preview_backend", "vocoder_select")


def detect_features() -> dict[str, bool]:
    """Which optional controls the page may show."""
    return {"asr": asr_available(), "stream": False, "preview_backend": False, "vocoder_select": False}


def asr_available() -> bool:
    """True when the ASR module imports, its recogniser is installed and a model is on disk (no download)."""
    try:
        asr = importlib.import_module("cosyvoice_mac.frontend.asr")
        if importlib.util.find_spec("faster_whisper") is None:
            return False
        if asr.ModelStore(allow_download=False).cached_multilingual() is not None:
            return True
        asr.bundled_english_model()
        return True
    except Exception:  # ImportError, TranscriptionError, a broken install: the button stays away
        return False
