"""Load official ``*.pt`` state dicts safely and strictly.

Checkpoints are read with ``torch.load(weights_only=True)`` (no pickled code runs), memory
mapped where the file allows it, and weight-norm parametrisations are folded into plain
``weight`` tensors, so our modules are ordinary convolutions (MPS has had no weight-norm kernel).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from cosyvoice_mac.errors import CosyVoiceError

_WEIGHT_NORM_SUFFIXES = {
    ".parametrizations.weight.original0": ".parametrizations.weight.original1",
    ".weight_g": ".weight_v",
}


class CheckpointError(CosyVoiceError, RuntimeError):
    """A checkpoint file is missing, unreadable or does not fit the model."""


def fold_weight_norm(magnitude: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """``W = g * v / ||v||`` with the norm over every dim but dim 0 (``weight_norm(dim=0)``).

    For ConvTranspose1d weights ``[in, out, k]`` dim 0 is the input channel; no transpose.
    """
    dims = tuple(range(1, direction.dim()))
    norm = direction.norm(dim=dims, keepdim=True)
    return magnitude * direction / norm


def fold_all_weight_norms(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace each (g, v) pair of a weight-normed layer by its folded ``.weight``."""
    folded: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    for key, tensor in state.items():
        for g_suffix, v_suffix in _WEIGHT_NORM_SUFFIXES.items():
            if key.endswith(g_suffix):
                prefix = key[: -len(g_suffix)]
                v_key = prefix + v_suffix
                if v_key not in state:
                    raise CheckpointError(f"weight-norm magnitude {key} has no direction {v_key}")
                folded[prefix + ".weight"] = fold_weight_norm(tensor.float(), state[v_key].float())
                consumed.update({key, v_key})
    for key, tensor in state.items():
        if key not in consumed and key not in folded:
            folded[key] = tensor
    return folded


def load_checkpoint(path: str | Path, *, hub_repo: str | None = None) -> dict[str, torch.Tensor]:
    """Read a state dict from ``path`` (CPU tensors), strip ``generator.``, fold weight norm.

    A missing file raises :class:`CheckpointError` naming the file and, when given, the hub
    repository it is downloaded from.
    """
    path = Path(path)
    if not path.is_file():
        where = f" Download it from the Hugging Face repo {hub_repo}." if hub_repo else ""
        raise CheckpointError(f"model file {path} is missing.{where}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:
        # Legacy (non-zip) checkpoints cannot be memory mapped.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot read checkpoint {path}: {error}") from error
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} does not hold a state dict")
    state = {key.removeprefix("generator."): value for key, value in state.items()}
    return fold_all_weight_norms(state)


def load_strict(
    module: nn.Module,
    state: dict[str, torch.Tensor],
    *,
    source: str,
    ignore: Iterable[str] = (),
) -> None:
    """Copy ``state`` into ``module``; every key must match (except ``ignore``d ones).

    The error names the missing and unexpected keys and the checkpoint they came from.
    """
    ignored = set(ignore)
    wanted = {key for key in module.state_dict() if key not in ignored}
    given = {key for key in state if key not in ignored}
    missing = sorted(wanted - given)
    unexpected = sorted(given - wanted)
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not match the model built from its config: "
            f"missing {_preview(missing)}; unexpected {_preview(unexpected)}"
        )
    shapes = module.state_dict()
    for key in sorted(given):
        if tuple(shapes[key].shape) != tuple(state[key].shape):
            raise CheckpointError(
                f"{source}: {key} has shape {tuple(state[key].shape)}, the config expects {tuple(shapes[key].shape)}"
            )
    module.load_state_dict({key: state[key] for key in given}, strict=False, assign=False)


def _preview(keys: list[str], limit: int = 6) -> str:
    if not keys:
        return "none"
    shown = ", ".join(keys[:limit])
    return f"{shown} (+{len(keys) - limit} more)" if len(keys) > limit else shown
