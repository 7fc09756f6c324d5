"""Attention masks shared by the flow's encoder and estimators.

Streaming inference re-runs the flow on a growing prefix; frames already emitted stay the same
because every attention is chunk-causal: a frame sees its own chunk and everything before it.
"""

from __future__ import annotations

import torch


def chunk_causal_mask(length: int, chunk_size: int, device: torch.device) -> torch.Tensor:
    """``(T, T)`` bool, True where query i may attend key j: ``j < (i // chunk_size + 1) * chunk_size``.

    Left context is unlimited. Upstream: ``cosyvoice/utils/mask.py::subsequent_chunk_mask``.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive for a chunk mask, got {chunk_size}")
    positions = torch.arange(length, device=device)
    chunk_end = (torch.div(positions, chunk_size, rounding_mode="floor") + 1) * chunk_size
    return positions.unsqueeze(0) < chunk_end.unsqueeze(1)


def new_rows_see_every_key(prefix_frames: int, length: int, chunk_size: int) -> bool:
    """Whether every one of ``length`` new frames after ``prefix_frames`` cached ones may attend every key.

    The same answer as ``chunk_causal_mask(prefix + length, chunk)[prefix:].all()``, from the sizes
    alone (no device sync, so a CUDA graph can capture the caller): the first new frame sees least.
    """
    return (prefix_frames // chunk_size + 1) * chunk_size >= prefix_frames + length


def host_may_read(device: torch.device) -> bool:
    """Whether code may read a ``device`` tensor's values on the host now: not while a CUDA graph is being
    captured there (a read would end the capture), so masks then take their general form instead."""
    return torch.device(device).type != "cuda" or not torch.cuda.is_current_stream_capturing()
