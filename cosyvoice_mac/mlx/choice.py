"""Which engine runs a model: MLX or PyTorch (importable without mlx).

``auto`` (the default) picks MLX for either model version on an Apple Silicon Mac where ``mlx`` imports
and the device policy is not an explicit non-GPU choice; PyTorch everywhere else (on Linux MLX is the
parity suite's CPU backend, not the fast path). ``mlx`` asks for it by name (``COSYVOICE_ENGINE=mlx``,
the page's engine menu, ``synth --engine mlx``); where it cannot run (mlx missing or not importable, or
a version whose row in ``versions.py`` lacks an MLX port of one of its stages) PyTorch runs. ``torch``
always means PyTorch. Every choice but a plain ``torch`` keeps its reason, for the status panel and the
sidecar.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from cosyvoice_mac.device import DEVICE_ENV
from cosyvoice_mac.mlx import ENGINE_ENV, ENGINES, mlx_available, requested_engine  # noqa: F401 (re-export)
from cosyvoice_mac.versions import MLX_STAGES, spec_for

MLX, TORCH = "mlx", "torch"


@dataclass(frozen=True)
class EngineChoice:
    """The engine that runs (``"mlx"`` or ``"torch"``) and why, when that is worth saying: what ``auto``
    went by, or why the engine asked for cannot run."""

    engine: str
    reason: str | None = None


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def mlx_problem() -> str | None:
    """Why MLX cannot run on this machine (not installed, or its import fails), or None."""
    if not mlx_available():
        hint = "pip install mlx (macOS 14+ on Apple Silicon)" if is_apple_silicon() else "pip install 'mlx[cpu]'"
        return f"the mlx package is not installed ({hint})"
    try:
        import mlx.core  # noqa: F401
    except Exception as error:  # noqa: BLE001 - a wheel for another macOS, a missing Metal library...
        return f"mlx does not import ({type(error).__name__}: {str(error)[:200]})"
    return None


def choose_engine(requested: str | None, version: str, device: str | None = None) -> EngineChoice:
    """The engine for ``version`` ('cosyvoice2' / 'cosyvoice3') given the request and the device policy
    (``device``, else ``$COSYVOICE_DEVICE``: only 'auto' or 'mps' lets ``auto`` pick MLX)."""
    name = requested_engine(requested)
    if name == TORCH:
        return EngineChoice(TORCH)
    spec = spec_for(version)
    if not spec.mlx_engine:
        missing = ", ".join(stage for stage in MLX_STAGES if stage not in spec.mlx_stages)
        return EngineChoice(TORCH, f"{spec.name} runs on PyTorch: its {missing} has no MLX port")
    if name == "auto":
        policy = str(device if device is not None else os.environ.get(DEVICE_ENV) or "auto").strip().lower()
        if not is_apple_silicon():
            return EngineChoice(TORCH, "Auto uses MLX on Apple Silicon Macs only; PyTorch runs here")
        if policy not in ("auto", "mps"):
            return EngineChoice(TORCH, f"the device is set to {policy}, and Auto uses MLX only with the GPU")
        if problem := mlx_problem():
            return EngineChoice(TORCH, f"MLX is not available on this machine: {problem}; PyTorch runs")
        return EngineChoice(MLX, "Auto: MLX is the fast engine on Apple Silicon")
    if problem := mlx_problem():
        return EngineChoice(TORCH, f"MLX was asked for but is not available on this machine: {problem}; PyTorch runs")
    return EngineChoice(MLX)
