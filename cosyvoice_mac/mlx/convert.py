"""Official ``llm.pt`` / ``flow.pt`` / ``hift.pt`` -> MLX arrays, converted once and optionally cached.

The checkpoints are read by the same loader as the PyTorch models (``cosyvoice_mac.checkpoint``: weight
norms folded), then every tensor becomes an ``mx.array``. Conv1d weights change layout: PyTorch keeps
``(C_out, C_in, K)``, MLX ``(C_out, K, C_in)`` (every 3-D tensor in these checkpoints is a Conv1d weight).
Key names are then mapped onto the MLX modules by each model's ``(pattern, replacement)`` table.

With a ``cache_dir`` the converted arrays are saved as ``<sha256 of the source file>-<dtype>.safetensors``
and read from there next time, so a changed checkpoint can never be served from a stale cache.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Iterable

import mlx.core as mx
import numpy as np
import torch

from cosyvoice_mac.checkpoint import load_checkpoint

CACHE_ENV = "COSYVOICE_MLX_CACHE"  # folder for converted weights; "off" disables the cache
_HASH_BLOCK = 1 << 22

KeyMap = Iterable[tuple[str, str]]


def default_cache_dir() -> Path | None:
    """``$COSYVOICE_MLX_CACHE``, else ``~/.cache/cosyvoice-mac/mlx``; None when the variable is ``off``."""
    configured = os.environ.get(CACHE_ENV, "")
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "cosyvoice-mac" / "mlx"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def to_mlx(tensor: torch.Tensor, dtype: mx.Dtype | None = None) -> mx.array:
    """A CPU torch tensor as an MLX array (conv layout untouched); float tensors become ``dtype`` if given."""
    array = mx.array(tensor.detach().cpu().float().numpy() if tensor.is_floating_point() else tensor.numpy())
    return array.astype(dtype) if dtype is not None and array.dtype == mx.float32 else array


def convert_state(
    state: dict[str, torch.Tensor], key_map: KeyMap = (), dtype: mx.Dtype | None = None, drop: Iterable[str] = ()
) -> dict[str, mx.array]:
    """A PyTorch state dict -> MLX arrays under MLX module names (3-D conv weights transposed)."""
    rules = [(re.compile(pattern), replacement) for pattern, replacement in key_map]
    dropped = set(drop)
    converted: dict[str, mx.array] = {}
    for key, tensor in state.items():
        if key in dropped:
            continue
        if tensor.dim() == 3:
            tensor = tensor.permute(0, 2, 1).contiguous()
        name = key
        for pattern, replacement in rules:
            name = pattern.sub(replacement, name)
        converted[name] = to_mlx(tensor, dtype)
    return converted


def load_converted(
    path: str | Path,
    key_map: KeyMap = (),
    *,
    dtype: mx.Dtype | None = None,
    drop: Iterable[str] = (),
    cache_dir: Path | None = None,
) -> dict[str, mx.array]:
    """Read checkpoint ``path`` as MLX arrays, through the safetensors cache in ``cache_dir`` when given."""
    path = Path(path)
    cached: Path | None = None
    if cache_dir is not None:
        tag = "native" if dtype is None else str(dtype).rsplit(".", 1)[-1]
        cached = Path(cache_dir) / f"{file_sha256(path)}-{tag}.safetensors"
        if cached.is_file():
            return dict(mx.load(str(cached)))
    weights = convert_state(load_checkpoint(path), key_map, dtype, drop)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial.safetensors")
        mx.save_safetensors(str(partial), weights)
        partial.replace(cached)  # never leave a half-written cache file under the final name
    return weights


def to_torch(array: mx.array) -> torch.Tensor:
    """An MLX array as a CPU torch tensor (float32/float64/int kept)."""
    if array.dtype in (mx.float16, mx.bfloat16):
        array = array.astype(mx.float32)
    return torch.from_numpy(np.array(array))
