"""Optional controls: each is on only when the code and model it needs are really there.

The layout asks ``detect_features()`` once; a control is built only when its flag is True, so a
missing optional part leaves no broken button behind. The flags, and where their controls slot in:

* ``asr``: speech recognition can fill the prompt transcript (``cosyvoice_mac.engine.asr`` imports,
  faster-whisper is installed and a model is on disk). Its button sits next to the transcript field and
  runs ``asr.transcribe`` in a child process (``engine.transcriber``): that module loads torch.
* ``stream``: a "Stream" toggle that plays EVENT_PROGRESS audio chunks as they arrive (``streaming.py``);
  it needs nothing extra, so it is always on.
* ``preview_backend``: the preview voice (``cosyvoice_mac.preview``) runs when no model folder exists and
  is offered in the model menu; it needs Piper and pyworld (the ``[preview]`` extra).
* ``vocoder_select``: a vocoder menu (torch / Core ML with compute units) under Advanced, on macOS only (Core
  ML runs nowhere else; where coremltools is missing the worker keeps torch and the status panel says why).
* ``engine_select``: the engine menu (MLX / PyTorch) under Advanced, on Apple Silicon, where MLX is the fast
  path; elsewhere only when ``$COSYVOICE_ENGINE_MENU=1`` asks for it (MLX's CPU backend, for tests and
  comparisons).

Both menus hide while the preview voice speaks: it has neither a vocoder nor an engine to choose.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys

from cosyvoice_mac.preview import preview_available
from cosyvoice_mac.settings import setting

FEATURES = ("asr", "stream", "preview_backend", "vocoder_select", "engine_select")
ENGINE_MENU_VARIABLE = setting("engine_menu").env


def detect_features() -> dict[str, bool]:
    """Which optional controls the page may show."""
    return {
        "asr": asr_available(),
        "stream": True,
        "preview_backend": preview_available(),
        "vocoder_select": sys.platform == "darwin",
        "engine_select": (sys.platform == "darwin" and platform.machine() == "arm64")
        or os.environ.get(ENGINE_MENU_VARIABLE) == "1",
    }


def asr_available() -> bool:
    """True when the ASR module imports, its recogniser is installed and a model is on disk (no download)."""
    try:
        asr = importlib.import_module("cosyvoice_mac.engine.asr")
        if importlib.util.find_spec("faster_whisper") is None:
            return False
        if asr.ModelStore(allow_download=False).cached_multilingual() is not None:
            return True
        asr.bundled_english_model()
        return True
    except Exception:  # ImportError, TranscriptionError, a broken install: the button stays away
        return False
