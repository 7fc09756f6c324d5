"""CosyVoice for Mac: local voice cloning with CosyVoice2 / Fun-CosyVoice3 in clean PyTorch."""

from __future__ import annotations

import os as _os
import sys as _sys

__version__ = "0.1.0"

# PyTorch registers its MPS CPU-fallback when torch is imported, reading this variable once. Setting it
# here, before any module of ours imports torch, makes ops MPS lacks run on the CPU instead of failing.
# device.py checks whether it took effect (it cannot when torch was imported before this package).
_MPS_FALLBACK_PRESET = _os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK")
_TORCH_IMPORTED_FIRST = "torch" in _sys.modules
_os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")

# Gradio rewrites its components' type stubs on every import, a third of the app's start (gradio_stubs.py).
from cosyvoice_mac import gradio_stubs as _gradio_stubs  # noqa: E402  (after the variable above, before any Gradio)

_gradio_stubs.install()


def __getattr__(name):
    # The front door; each name loads its module on first use, so ``import cosyvoice_mac`` stays light.
    if name == "CosyVoice":
        from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

        return CosyVoice
    if name == "load_model":
        from cosyvoice_mac.load import load_model

        return load_model
    if name in ("Request", "Sampling", "Voice"):
        from cosyvoice_mac import request

        return getattr(request, name)
    if name == "CosyVoiceError":
        from cosyvoice_mac.errors import CosyVoiceError

        return CosyVoiceError
    raise AttributeError(f"module 'cosyvoice_mac' has no attribute {name!r}")


__all__ = ["CosyVoice", "CosyVoiceError", "Request", "Sampling", "Voice", "load_model"]
