"""Optional controls: each is on only when the code and model it needs are really there.

The layout asks ``detect_features()`` once and builds a control only when its flag is True, so a
missing optional part leaves no broken button behind. Planned entries, built when their code lands:

* ``asr``: a "fill the transcript by speech recognition" button (``cosyvoice_mac.asr``, once it
  imports and reports its model available through ``is_available()``);
* ``stream``: a "Stream" toggle that plays EVENT_PROGRESS audio chunks as they arrive;
* ``preview_backend``: a label naming the backend of a preview run;
* ``vocoder_select``: a vocoder menu (torch / Core ML with compute units).
"""
from __future__ import annotations

import importlib

FEATURES = ("asr", "stream", "preview_backend", "vocoder_select")


def detect_features() -> dict[str, bool]:
    """Which optional controls the page shows."""
    return {"asr": asr_available(), "stream": False, "preview_backend": False, "vocoder_select": False}


def asr_available() -> bool:
    """True when the ASR module imports and says its model is installed."""
    try:
        asr = importlib.import_module("cosyvoice_mac.asr")
    except ImportError:
        return False
    check = getattr(asr, "is_available", None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:  # a broken optional part must not take the page down
        return False
