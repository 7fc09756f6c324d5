"""Official ``llm.pt`` / ``flow.pt`` / ``hift.pt`` -> MLX arrays, converted once and optionally cached.

The checkpoints are read by the same loader as the PyTorch models (``cosyvoice_mac.checkpoint``: weight
norms folded), then every tensor becomes an ``mx.array``. Conv1d weights change layout: PyTorch keeps
``(C_out, C_in, K)``, MLX ``(C_out, K, C_in)`` (every 3-D tensor in these checkpoints is a Conv1d weight).
Key names are then mapped onto the MLX modules by each model's ``(pattern, replacement)`` table.

With a ``cache_dir`` the converted arrays are saved as ``<sha256 of the source file>-<dtype>.safetensors``
(in the dtype the model runs, e.g. a 16-bit LLM's) and read from there next time, so a changed checkpoint
is never served from a stale cache. The hash is kept in ``sources.json`` with the file's size and
modification time, and computed again only when either changes: a start reads no 3.4 GB to hash it. The
first conversion shows a progress bar (hashing, then converting).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Iterable

import mlx.core as mx
import numpy as np
import torch

from cosyvoice_mac.checkpoint import load_checkpoint
from cosyvoice_mac.paths import atomic_file, atomic_write
from cosyvoice_mac.settings import setting

CACHE_ENV = setting("mlx_cache").env  # folder for converted weights; "off" disables the cache
_HASH_BLOCK = 1 << 22
SOURCES_INDEX = "sources.json"  # resolved source path -> {size, mtime_ns, sha256}

KeyMap = Iterable[tuple[str, str]]


def default_cache_dir() -> Path | None:
    """``$COSYVOICE_MLX_CACHE``, else ``~/.cache/cosyvoice-mac/mlx``; None when the variable is ``off``."""
    configured = os.environ.get(CACHE_ENV, "")
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "cosyvoice-mac" / "mlx"


def file_sha256(path: Path, progress: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle, _bar(progress, f"hashing {path.name}", path.stat().st_size, "B") as bar:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _bar(shown: bool, description: str, total: int, unit: str = "it"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit=unit, unit_scale=unit == "B", disable=not shown, leave=False)


def source_digest(path: Path, cache_dir: Path) -> str:
    """The sha256 of ``path``, from ``cache_dir/sources.json`` while its size and mtime are unchanged."""
    index_path = Path(cache_dir) / SOURCES_INDEX
    try:
        index = json.loads(index_path.read_text())
        index = index if isinstance(index, dict) else {}
    except (OSError, ValueError):
        index = {}
    stat, key = path.stat(), str(path.resolve())
    seen = index.get(key)
    if isinstance(seen, dict) and seen.get("size") == stat.st_size and seen.get("mtime_ns") == stat.st_mtime_ns:
        return str(seen["sha256"])
    digest = file_sha256(path, progress=True)
    index[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    index_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(index_path, json.dumps(index, indent=1).encode())
    return digest


def to_mlx(tensor: torch.Tensor, dtype: mx.Dtype | None = None) -> mx.array:
    """A CPU torch tensor as an MLX array (conv layout untouched); float tensors become ``dtype`` if given.

    An fp16 ``dtype`` is cast by torch first, so no fp32 MLX copy is made on the way. A view is made contiguous
    first: ``mx.array`` of a strided numpy view copies the whole span of its base, not the view's elements."""
    tensor = tensor.detach().cpu().contiguous()
    if not tensor.is_floating_point():
        return mx.array(tensor.numpy())
    if dtype is not None and dtype == mx.float16:
        return mx.array(tensor.half().numpy())
    array = mx.array(tensor.float().numpy())
    return array.astype(dtype) if dtype is not None else array


def convert_state(
    state: dict[str, torch.Tensor],
    key_map: KeyMap = (),
    dtype: mx.Dtype | None = None,
    drop: Iterable[str] = (),
    dtype_keys: str | None = None,
    progress: str | None = None,
) -> dict[str, mx.array]:
    """A PyTorch state dict -> MLX arrays under MLX module names (3-D conv weights transposed); ``progress``
    names a progress bar over the tensors (None: none).

    ``dtype`` applies to the float tensors whose MLX name matches ``dtype_keys`` (a regex; None: all).
    Each array is evaluated as it is made: the lazy casts never hold a second copy of the whole state.
    """
    rules = [(re.compile(pattern), replacement) for pattern, replacement in key_map]
    selected = re.compile(dtype_keys) if dtype_keys else None
    dropped = set(drop)
    converted: dict[str, mx.array] = {}
    with _bar(progress is not None, progress or "", len(state)) as bar:
        for key, tensor in state.items():
            bar.update(1)
            if key in dropped:
                continue
            name = _mlx_name(key, rules)
            converted[name] = _converted(tensor, dtype if selected is None or selected.match(name) else None)
            mx.eval(converted[name])
    return converted


def _mlx_name(key: str, rules) -> str:
    for pattern, replacement in rules:
        key = pattern.sub(replacement, key)
    return key


def _converted(tensor: torch.Tensor, dtype: mx.Dtype | None) -> mx.array:
    if tensor.dim() == 3:  # Conv1d: (C_out, C_in, K) -> (C_out, K, C_in)
        tensor = tensor.permute(0, 2, 1).contiguous()
    return to_mlx(tensor, dtype)


def load_converted(
    path: str | Path,
    key_map: KeyMap = (),
    *,
    dtype: mx.Dtype | None = None,
    drop: Iterable[str] = (),
    dtype_keys: str | None = None,
    cache_dir: Path | None = None,
) -> dict[str, mx.array]:
    """Read checkpoint ``path`` as MLX arrays, through the safetensors cache in ``cache_dir`` when given
    (``dtype`` for the names matching ``dtype_keys``, as :func:`convert_state`)."""
    path = Path(path)
    cached: Path | None = None
    if cache_dir is not None:
        tag = "native" if dtype is None else str(dtype).rsplit(".", 1)[-1]
        if dtype is not None and dtype_keys:
            tag += "-" + hashlib.sha256(dtype_keys.encode()).hexdigest()[:8]
        cached = Path(cache_dir) / f"{source_digest(path, Path(cache_dir))}-{tag}.safetensors"
        if cached.is_file():
            return dict(mx.load(str(cached)))
    weights = convert_state(load_checkpoint(path), key_map, dtype, drop, dtype_keys, progress=f"converting {path.name}")
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(cached) as file:  # never a half-written cache file under the final name
                mx.save_safetensors(file, weights)
        except OSError:  # a full or read-only cache folder: this start runs, the next converts again
            pass
    return weights


def to_torch(array: mx.array) -> torch.Tensor:
    """An MLX array as a CPU torch tensor (float32/float64/int kept)."""
    if array.dtype in (mx.float16, mx.bfloat16):
        array = array.astype(mx.float32)
    return torch.from_numpy(np.array(array))
