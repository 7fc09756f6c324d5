"""Which engine runs a model: MLX or PyTorch (importable without mlx).

``auto`` (the default) picks MLX for CosyVoice3 on an Apple Silicon Mac where ``mlx`` imports and the
device policy is not an explicit non-GPU choice; PyTorch everywhere else (on Linux MLX is the parity
suite's CPU backend, not the fast path). ``mlx`` asks for it by name (``COSYVOICE_ENGINE=mlx``); where it
cannot run (no mlx, or CosyVoice2, whose U-Net flow has no MLX port) PyTorch runs and the reason is
kept, for the status panel. ``torch`` always means PyTorch.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.device import DEVICE_ENV
from cosyvoice_mac.mlx import mlx_available
from cosyvoice_mac.versions import spec_for

ENGINE_ENV = "COSYVOICE_ENGINE"
ENGINES = ("auto", "mlx", "torch")
MLX, TORCH = "mlx", "torch"


@dataclass(frozen=True)
class EngineChoice:
    """The engine that runs (``"mlx"`` or ``"torch"``) and, when it is not the one asked for, why."""

    engine: str
    reason: str | None = None


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def requested_engine(requested: str | None = None) -> str:
    """``requested``, else ``$COSYVOICE_ENGINE``, else ``auto``; a name outside ENGINES is a ConfigError."""
    source = "argument"
    if requested is None:
        requested, source = os.environ.get(ENGINE_ENV) or "auto", ENGINE_ENV
    name = requested.strip().lower()
    if name not in ENGINES:
        where = f"{ENGINE_ENV}={requested}" if source == ENGINE_ENV else f"engine {requested!r}"
        raise ConfigError(f"{where} is not an engine; use one of {', '.join(ENGINES)}")
    return name


def choose_engine(requested: str | None, version: str, device: str | None = None) -> EngineChoice:
    """The engine for ``version`` ('cosyvoice2' / 'cosyvoice3') given the request and the device policy
    (``device``, else ``$COSYVOICE_DEVICE``: only 'auto' or 'mps' lets ``auto`` pick MLX)."""
    name = requested_engine(requested)
    if name == TORCH:
        return EngineChoice(TORCH)
    if name == "auto":
        policy = device if device is not None else os.environ.get(DEVICE_ENV) or "auto"
        gpu_policy = str(policy).strip().lower() in ("auto", "mps")
        if spec_for(version).mlx_engine and is_apple_silicon() and gpu_policy and mlx_available():
            return EngineChoice(MLX)
        return EngineChoice(TORCH)
    if not spec_for(version).mlx_engine:
        return EngineChoice(
            TORCH,
            "the MLX engine runs CosyVoice3; CosyVoice2's U-Net flow has no MLX port yet, so PyTorch runs this model",
        )
    if not mlx_available():
        hint = "pip install mlx (macOS 14+ on Apple Silicon)" if is_apple_silicon() else "pip install 'mlx[cpu]'"
        return EngineChoice(TORCH, f"MLX was asked for but the mlx package is not installed ({hint}); PyTorch runs")
    return EngineChoice(MLX)
