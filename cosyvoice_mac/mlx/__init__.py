"""MLX engine for CosyVoice2 and CosyVoice3: the same networks as ``cosyvoice_mac.models`` on Apple's array framework.

Metal on Apple Silicon (``mlx``), the CPU on Linux (``mlx[cpu]``, which runs the parity suite). The
modules read the same official ``llm.pt`` / ``flow.pt`` / ``hift.pt`` and the same config dataclasses as
the PyTorch models and keep their call contracts (PyTorch tensors in and out, the same samplers), so
the pipeline can run either. Import :mod:`cosyvoice_mac.mlx.engine` only after :func:`mlx_available`.
"""

from __future__ import annotations

import importlib.util
import os

from cosyvoice_mac.settings import choices, setting

ENGINE_ENV = setting("engine").env
ENGINES = choices("engine")


def mlx_available() -> bool:
    """True when ``mlx.core`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("mlx.core") is not None
    except (ImportError, ValueError):
        return False


def requested_engine(requested: str | None = None) -> str:
    """``requested``, else ``$COSYVOICE_ENGINE``, else ``auto``; a name outside ENGINES is a ConfigError.

    Torch-free, so the page process can check a choice without loading torch."""
    from cosyvoice_mac.config import ConfigError

    source = "argument"
    if requested is None:
        requested, source = os.environ.get(ENGINE_ENV) or setting("engine").default, ENGINE_ENV
    name = requested.strip().lower()
    if name not in ENGINES:
        where = f"{ENGINE_ENV}={requested}" if source == ENGINE_ENV else f"engine {requested!r}"
        raise ConfigError(f"{where} is not an engine; use one of {', '.join(ENGINES)}")
    return name
