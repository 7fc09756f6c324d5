"""The decoding state that lives on the device: the static KV cache and the RoPE table.

Both are allocated once and never resized by a decoding step, so a step reads and writes fixed
addresses (what a CUDA graph replays) and its next position is a device tensor, advanced in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from cosyvoice_mac.models.llm.qwen2 import Qwen2Config


class StaticKVCache:
    """Owns one request's key/value tensors for every layer, allocated once at full capacity.

    ``kv``: (num_layers, 2, B, num_key_value_heads, capacity, head_dim), keys at index 0 and
    values at index 1 of dim 1, so one ``index_copy_`` per layer writes both. ``keys`` and
    ``values`` are views (num_layers, B, KVH, capacity, head_dim). ``length`` positions are filled
    (host count); ``position`` is the same count as a (1,) long tensor on the cache's device, the
    next position a decoding step writes. Zero-filled: a step that attends over a whole bucket of
    positions masks the unwritten ones, and a masked zero contributes nothing (garbage could be NaN).
    """

    def __init__(
        self,
        config: Qwen2Config,
        capacity: int,
        *,
        device: torch.device,
        dtype: torch.dtype,
        batch_size: int = 1,
    ):
        if capacity > config.max_position_embeddings:
            raise ValueError(
                f"a request needs {capacity} positions but the Qwen2 config allows "
                f"max_position_embeddings={config.max_position_embeddings}: use a shorter text or prompt"
            )
        shape = (config.num_hidden_layers, 2, batch_size, config.num_key_value_heads, capacity, config.head_dim)
        self._hold(torch.zeros(shape, device=device, dtype=dtype))
        self.position = torch.zeros(1, device=device, dtype=torch.long)
        self.slots = torch.arange(capacity, device=device)  # position of every slot, for masks
        self.length = 0

    def _hold(self, kv: torch.Tensor) -> None:
        self.kv = kv
        self.keys, self.values = kv[:, 0], kv[:, 1]
        # Per-layer views made once, so a step slices no more than it must.
        self.layer_kv = list(kv.unbind(0))
        self.layer_keys, self.layer_values = list(self.keys.unbind(0)), list(self.values.unbind(0))

    @property
    def batch_size(self) -> int:
        return self.kv.shape[2]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` (a long tensor on the cache's device), in that order: the sequences
        still decoding, once others have stopped (a copy of the kept rows; the others' memory is freed)."""
        self._hold(self.kv.index_select(2, rows))

    @property
    def capacity(self) -> int:
        return self.kv.shape[4]

    def reset(self) -> None:
        """Forget every position (the tensors stay where they are)."""
        self.length = 0
        self.position.zero_()

    def check_room(self, steps: int) -> None:
        end = self.length + steps
        if end > self.capacity:
            raise ValueError(f"KV cache full: position {end} exceeds its capacity {self.capacity}")

    def store(self, layer: int, positions: torch.Tensor, kv: torch.Tensor) -> None:
        """Write ``kv`` (2, B, KVH, T, head_dim) at ``positions`` (T,) of ``layer``: one operation."""
        self.layer_kv[layer].index_copy_(3, positions, kv)

    def span(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (B, KVH, length, head_dim) of slots ``0..length-1`` of ``layer`` (views)."""
        return self.layer_keys[layer].narrow(2, 0, length), self.layer_values[layer].narrow(2, 0, length)


class RotaryTable:
    """Owns the RoPE rows of every position up to a length, for one device and dtype.

    ``table``: (length, 2, 1, head_dim): row ``p`` holds ``cos`` and a signed ``sin`` (first half
    negated; the 1 broadcasts over heads), so that ``rope(x) = x·cos + swap_halves(x)·sin`` equals Hugging Face's
    ``x·cos + rotate_half(x)·sin`` exactly. Built on the CPU in float32 as Hugging Face does
    (``inv_freq = 1/θ^(2i/d)``, ``freqs = pos·inv_freq``, ``cat(freqs, freqs)``), then cast and moved.
    """

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        self.head_dim = head_dim
        self.theta = theta
        self.max_positions = max_positions
        self.table: torch.Tensor | None = None

    @torch.inference_mode(False)
    def _build(self, length: int, device: torch.device, dtype: torch.dtype) -> None:
        # Ordinary (not inference-mode) tensors: the table is reused by later calls in any mode.
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        inv_freq = 1.0 / (self.theta**exponent)
        positions = torch.arange(length, dtype=torch.int64).float()
        freqs = positions[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        sin = angles.sin()
        sin[:, : self.head_dim // 2].neg_()
        self.table = torch.stack((angles.cos(), sin), dim=1)[:, :, None].to(device=device, dtype=dtype)

    def ensure(self, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The table, rebuilt if it is shorter than ``length`` or on another device/dtype."""
        table = self.table
        if table is None or table.shape[0] < length or table.device != device or table.dtype != dtype:
            if length > self.max_positions:
                raise ValueError(f"position {length} exceeds max_position_embeddings={self.max_positions}")
            # Grow in powers of two so a request's decode steps rebuild the table at most once.
            size = min(max(length, 2 * (table.shape[0] if table is not None else 0), 256), self.max_positions)
            self._build(size, device, dtype)
        return self.table

    def rows(self, start: int, count: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """(count, 2, 1, head_dim) rows of positions ``start..start+count-1`` (a view)."""
        return self.ensure(start + count, device, dtype)[start : start + count]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate ``x`` (B, T, heads, head_dim) in place by ``cos``/``sin`` (T, 1, head_dim) of
    :class:`RotaryTable` (``rows.unbind(1)``): three operations."""
    swapped = x.roll(x.shape[-1] // 2, dims=-1)  # (x2, x1): rotate_half without its negation
    x.mul_(cos).addcmul_(swapped, sin)
