"""MLX engine for CosyVoice3: the same networks as ``cosyvoice_mac.models`` on Apple's array framework.

Metal on Apple Silicon (``mlx``), the CPU on Linux (``mlx[cpu]``, which runs the parity suite). The
modules read the same official ``llm.pt`` / ``flow.pt`` / ``hift.pt`` and the same config dataclasses as
the PyTorch models and keep their call contracts (PyTorch tensors in and out, the same samplers), so
the pipeline can run either. Import :mod:`cosyvoice_mac.mlx.engine` only after :func:`mlx_available`.
"""

from __future__ import annotations

import importlib.util


def mlx_available() -> bool:
    """True when ``mlx.core`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("mlx.core") is not None
    except (ImportError, ValueError):
        return False
