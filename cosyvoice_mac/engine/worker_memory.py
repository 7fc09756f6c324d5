"""Inside the worker: what it gives back after each job and what it keeps for its life.

A job's garbage is collected, the device's cached blocks and (glibc) the freed heap pages go back to the system
(``release_memory``); what the model's load left is taken out of the collector's walks once (``keep_for_life``), and
walked again only when the worker drops part of it (``collect_everything``). Imported only by the worker.
"""

from __future__ import annotations

import gc

import torch

from cosyvoice_mac import device as device_policy
from cosyvoice_mac.heap import return_freed_heap


def release_memory(*devices: torch.device) -> None:
    """Collect garbage, give cached device blocks back, and (glibc) return freed heap pages to the OS."""
    gc.collect()
    for device in {str(d) for d in devices if d is not None}:
        try:
            device_policy.empty_cache(device)
        except Exception:  # hygiene must never fail a job (e.g. a device whose runtime is gone)
            pass
    return_freed_heap()


def keep_for_life() -> None:
    """Take every object alive now out of the collector's walks (``gc.freeze``): the worker calls it once its model
    is loaded and warm, because the imports and the model live as long as the process. The full collection after
    each job then walks only what was made since, instead of the 0.2-0.3 million objects torch and a model leave
    (0.1-0.2 s of CPU per job, measured on the tiny models; more with a full one)."""
    gc.collect()
    gc.freeze()


def collect_everything() -> None:
    """After the worker dropped part of what it froze (the MLX engine, once PyTorch took a job over): a collection
    that walks the frozen objects too, then the survivors frozen again. Without a freeze, a full collection."""
    if not gc.get_freeze_count():
        gc.collect()
        return
    gc.unfreeze()
    keep_for_life()
