"""How much memory MLX may use on this machine, and handing its buffer cache back.

MLX keeps freed buffers in a cache for reuse and, by default, lets its arrays grow to 1.5 times Metal's
recommended working set: on an 8 GB Mac that is past the RAM, into swap. The limits here come from the
machine's RAM (as the device policy reads it, so a simulated 8 GiB machine gets an 8 GB Mac's limits):
the arrays may take ``MEMORY_SHARE`` of it before MLX waits for running work to free some, and the cache
holds at most ``CACHE_SHARE`` of it (``LOW_MEMORY_CACHE_BYTES`` in the low-memory mode). The pipeline
clears the cache after the warm-up and after every sentence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import mlx.core as mx

MEMORY_SHARE = 0.7  # of RAM: the rest is the system's, the page's and the ONNX frontends'
CACHE_SHARE = 1 / 16  # of RAM: 1 GiB on a 16 GB Mac
LOW_MEMORY_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class MlxMemoryLimits:
    """The limits set on MLX (bytes) and the RAM they were taken from."""

    memory_bytes: int
    cache_bytes: int
    ram_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def memory_limits(ram_bytes: int, low_memory: bool) -> MlxMemoryLimits:
    cache = min(int(ram_bytes * CACHE_SHARE), LOW_MEMORY_CACHE_BYTES) if low_memory else int(ram_bytes * CACHE_SHARE)
    return MlxMemoryLimits(memory_bytes=int(ram_bytes * MEMORY_SHARE), cache_bytes=cache, ram_bytes=ram_bytes)


def apply_memory_limits(low_memory: bool, ram_bytes: int | None = None) -> MlxMemoryLimits:
    """Set MLX's memory and cache limits for this machine (``ram_bytes``, else its RAM); returns them."""
    from cosyvoice_mac import device  # the device policy's view of the machine (a bench may simulate 8 GiB)

    limits = memory_limits(ram_bytes or device.psutil.virtual_memory().total, low_memory)
    mx.set_memory_limit(limits.memory_bytes)
    mx.set_cache_limit(limits.cache_bytes)
    return limits


def release_cache() -> None:
    """Hand MLX's buffer cache back to the system (after the warm-up, between sentences, after a job)."""
    mx.clear_cache()
