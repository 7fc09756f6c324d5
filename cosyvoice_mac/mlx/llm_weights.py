"""The MLX LLM loaded in the precision it runs: cached in that precision, its text table kept off MLX if asked.

The weight cache holds the LLM as it runs (``<sha256 of llm.pt>-llm-<precision>[-g<group>].safetensors``,
the hash kept per size and mtime by ``convert.source_digest``): an int8 or int4 LLM is quantised on its
first start only, and later starts read the quantised weights as they are. A file whose metadata does not
name the same precision and group size is never used.

In the low-memory mode the 151936-row text table (0.27 GB in fp16) stays out of MLX's arrays: a
:class:`HostTextTable` holds it as a read-only memory map of the cached file (only the rows a request
reads become resident, and the system may drop them again), or as a numpy array where there is no cache
file (random weights, the cache turned off). A request reads a few dozen rows of it, once per sentence.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from cosyvoice_mac.mlx.convert import source_digest
from cosyvoice_mac.mlx.llm_gate import group_size
from cosyvoice_mac.mlx.llm_precision import (
    LLM_PRECISIONS,
    apply_llm_precision,
    quantizable,
    read_dtype,
)
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM
from cosyvoice_mac.models.llm import SpeechLMConfig
from cosyvoice_mac.paths import atomic_file

TEXT_TABLE = "backbone.embed_tokens.weight"
_NUMPY_OF_SAFETENSORS = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}  # bf16: its bits, viewed on lookup
_MLX_OF_SAFETENSORS = {"F32": mx.float32, "F16": mx.float16, "BF16": mx.bfloat16}


class HostTextTable:
    """Owns the LLM's ``(V, D)`` text-embedding table outside MLX's arrays: a numpy array or a read-only
    memory map. ``(B, T)`` integer ids -> ``(B, T, D)`` rows as an MLX array in the table's dtype; only
    those rows are copied. Not an ``nn.Module``, so the LLM's ``parameters()`` never list it."""

    def __init__(self, rows: np.ndarray, dtype: mx.Dtype):
        self.rows, self.dtype = rows, dtype

    @classmethod
    def of(cls, table: mx.array) -> "HostTextTable":
        """A host copy of an MLX table (bf16 kept as its bits)."""
        bits = table.view(mx.uint16) if table.dtype == mx.bfloat16 else table
        return cls(np.array(bits), table.dtype)

    @classmethod
    def mapped(cls, path: Path, key: str = TEXT_TABLE) -> "HostTextTable":
        """The tensor ``key`` of safetensors file ``path`` as a read-only memory map (nothing read yet)."""
        header, data_start = safetensors_header(path)
        entry = header[key]
        rows = np.memmap(
            path,
            dtype=_NUMPY_OF_SAFETENSORS[entry["dtype"]],
            mode="r",
            offset=data_start + entry["data_offsets"][0],
            shape=tuple(entry["shape"]),
        )
        return cls(rows, _MLX_OF_SAFETENSORS[entry["dtype"]])

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.rows.shape)

    def __call__(self, ids: mx.array) -> mx.array:
        picked = mx.array(np.take(self.rows, np.asarray(ids, dtype=np.int64), axis=0))
        return picked.view(self.dtype) if picked.dtype != self.dtype else picked


def cache_path(source: Path, precision: str, cache_dir: Path) -> Path:
    """Where ``source``'s LLM in ``precision`` is cached (the group size is part of a quantised one's name)."""
    name = f"{source_digest(source, cache_dir)}-llm-{precision}"
    if isinstance(LLM_PRECISIONS[precision], int):
        name += f"-g{group_size(precision)}"
    return Path(cache_dir) / f"{name}.safetensors"


def cache_metadata(precision: str) -> dict[str, str]:
    quantised = isinstance(LLM_PRECISIONS[precision], int)
    return {"precision": precision, "group_size": str(group_size(precision) if quantised else 0)}


def load_llm(
    source: Path,
    config: SpeechLMConfig,
    precision: str,
    *,
    cache_dir: Path | None,
    host_table: bool = False,
) -> MlxSpeechLM:
    """``llm.pt`` (``source``) as an MLX LLM in ``precision``, every weight evaluated: read from the cache
    when it holds this precision, else converted (in 16 bits unless fp32), brought to ``precision`` and
    cached. ``host_table`` keeps the text table out of MLX (:class:`HostTextTable`)."""
    cached = cache_path(source, precision, cache_dir) if cache_dir is not None else None
    if cached is not None and _holds(cached, precision):
        llm = skeleton(config, precision)
        weights = mx.load(str(cached))  # lazy: an array is read when it is evaluated
        if host_table:
            llm.backbone.embed_tokens = HostTextTable.mapped(cached)
            weights.pop(TEXT_TABLE)  # never read into MLX
        llm.load_weights(list(weights.items()), strict=True)
        mx.eval(llm.parameters())
        llm.precision = precision
        return llm
    llm = apply_llm_precision(MlxSpeechLM.from_checkpoint(source, config, dtype=read_dtype(precision)), precision)
    if cached is not None:
        try:
            save(cached, dict(tree_flatten(llm.parameters())), precision)
        except OSError:  # a full or read-only cache folder: this start runs, the next converts again
            cached = None
    return keep_table_on_host(llm, mapped_from=cached) if host_table else llm


def skeleton(config: SpeechLMConfig, precision: str) -> MlxSpeechLM:
    """An LLM shaped as ``precision`` stores it, its arrays left lazy (never computed: the cache's replace
    them), so the quantised layers exist without quantising anything."""
    llm = MlxSpeechLM(config)
    bits = LLM_PRECISIONS[precision]
    if isinstance(bits, int):
        group = group_size(precision)
        for layer in llm.backbone.layers:
            nn.quantize(layer, group_size=group, bits=bits, class_predicate=lambda _, m: quantizable(m, group))
    return llm


def keep_table_on_host(llm: MlxSpeechLM, mapped_from: Path | None = None) -> MlxSpeechLM:
    """Move the text table out of MLX: mapped from the cache file ``mapped_from`` (which holds it as the
    LLM has it), else copied to a host array (random weights, no cache); MLX's buffer is handed back."""
    table = llm.backbone.embed_tokens.weight
    llm.backbone.embed_tokens = HostTextTable.of(table) if mapped_from is None else HostTextTable.mapped(mapped_from)
    del table
    mx.clear_cache()
    return llm


def save(path: Path, weights: dict[str, mx.array], precision: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as file:  # never a half-written file under the final name, even after a power cut
        mx.save_safetensors(file, weights, metadata=cache_metadata(precision))


def safetensors_header(path: Path) -> tuple[dict, int]:
    """A safetensors file's header (name -> dtype, shape, data_offsets; ``__metadata__``) and where its data
    starts: the format is an 8-byte little-endian header length, the JSON header, then the tensors."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        return json.loads(handle.read(length)), 8 + length


def _holds(path: Path, precision: str) -> bool:
    """Whether ``path`` exists and was written for ``precision`` at this group size."""
    try:
        header, _ = safetensors_header(path)
    except (OSError, ValueError):
        return False
    return header.get("__metadata__") == cache_metadata(precision)
