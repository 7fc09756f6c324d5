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
