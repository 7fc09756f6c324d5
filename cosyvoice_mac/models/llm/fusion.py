"""Fused projections that keep the official checkpoint keys.

A decoding step pays per operation, so q/k/v are one ``nn.Linear`` (``qkv_proj``) and gate/up
another (``gate_up_proj``). The checkpoint format stays the official one: loading concatenates
``q_proj``/``k_proj``/``v_proj`` (``gate_proj``/``up_proj``) rows into the fused weight, and
``state_dict()`` hands out the official keys again as row slices (views) of the fused weight.
A module that replaced a fused ``nn.Linear`` (16-bit storage, a quantizer) keeps this as long as
its state dict holds a floating ``weight`` (and ``bias``) of the fused shape; any other key under
the fused name is passed through untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def fuse_official_keys(module: nn.Module, fused: str, parts: Sequence[tuple[str, int]]) -> None:
    """Make ``module.<fused>`` load from and save to the keys ``<part>.weight`` / ``<part>.bias``.

    ``parts``: (official name, rows) in the order the fused weight stacks them.
    """
    names = [name for name, _ in parts]
    rows = [count for _, count in parts]

    def load_hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for kind in ("weight", "bias"):
            keys = [f"{prefix}{name}.{kind}" for name in names]
            present = [key in state_dict for key in keys]
            if not any(present):
                continue
            if not all(present):
                missing_keys.extend(key for key, here in zip(keys, present) if not here)
                for key in keys:
                    state_dict.pop(key, None)
                continue
            pieces = [state_dict.pop(key) for key in keys]
            target = getattr(getattr(module, fused), kind, None)
            if (
                isinstance(target, torch.Tensor)
                and target.is_meta
                and not local_metadata.get("assign_to_params_buffers")
            ):
                pieces = [piece.to("meta") for piece in pieces]  # a key/shape check: copying into meta is a no-op
            state_dict[f"{prefix}{fused}.{kind}"] = torch.cat(pieces, dim=0)

    def save_hook(owner, state_dict, prefix, local_metadata):
        for kind in ("weight", "bias"):
            key = f"{prefix}{fused}.{kind}"
            value = state_dict.get(key)
            if value is None or not value.is_floating_point() or value.shape[0] != sum(rows):
                continue
            del state_dict[key]
            for name, piece in zip(names, value.split(rows, dim=0)):
                state_dict[f"{prefix}{name}.{kind}"] = piece

    module._register_load_state_dict_pre_hook(load_hook)
    module.register_state_dict_post_hook(save_hook)
