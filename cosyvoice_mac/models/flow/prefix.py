"""A voice prompt's share of a streaming flow call, computed once and reused (the flow's streaming cache).

In a streaming call every attention is chunk-causal and every convolution causal, and the sampler
starts from the same fixed noise each time. So the first whole chunks of the prompt follow the same
trajectory in every call: at each Euler step, each attention layer sees the same keys and values
over them and each causal convolution the same input frames. :class:`FlowPrefix` keeps those per
step; a later call computes only the frames after the prefix, with its attention reading the
cached keys/values and its convolutions starting from the cached left context. The result equals
the full computation (tests/test_flow_prefix.py and the reference's first streaming chunk).

A prefix is valid only while it ends on the chunk grid and at least the look-ahead (3 tokens) of
prompt follows it, so no later token can reach it; :meth:`Flow.build_prefix` checks both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class StepState:
    """Owns one Euler step's tensors over the prefix, keyed by the layer that made them:
    attention keys and values ``(B, H, Tp, d)`` and each causal convolution's last input frames
    ``(B, C, k - 1)``. While ``recording`` the layers store them; afterwards they read them.

    ``keep`` (recording only): record the prefix of the call's first ``keep`` frames, not of all of
    them (a new voice's first streamed chunk records its prefix on the way; chunk-causal attention
    and causal convolutions make those frames' tensors the same as in a call over them alone).
    """

    frames: int = 0
    recording: bool = True
    tensors: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    keep: int | None = None

    def keys_and_values(self, owner: nn.Module, keys: torch.Tensor, values: torch.Tensor):
        """``keys, values (B, H, Tn, d)`` of the new frames -> the same with the prefix's in front (dim 2)."""
        slot = id(owner)
        if self.recording:
            kept = (keys, values) if self.keep is None else (z[:, :, : self.keep].clone() for z in (keys, values))
            self.tensors[(slot, "k")], self.tensors[(slot, "v")] = kept
            return keys, values
        return (
            torch.cat([self.tensors[(slot, "k")], keys], dim=2),
            torch.cat([self.tensors[(slot, "v")], values], dim=2),
        )

    def left_padded(self, owner: nn.Module, x: torch.Tensor, frames: int) -> torch.Tensor:
        """``x (B, C, T)`` with ``frames`` frames of left context: zeros at the sequence start, else the prefix's."""
        slot = (id(owner), "tail")
        if self.recording:
            padded = F.pad(x, (frames, 0))
            end = padded.shape[-1] - frames if self.keep is None else self.keep  # the context of frame `end`
            window = padded[..., end : end + frames]
            self.tensors[slot] = window if self.keep is None else window.clone()  # a copy frees the call's rest
            return padded
        return torch.cat([self.tensors[slot], x], dim=-1)

    def branch(self, index: int) -> "StepState":
        """A recorded state's view of one CFG branch (batch row ``index``): views, not copies."""
        return StepState(self.frames, False, {key: t[index : index + 1] for key, t in self.tensors.items()})

    def join(self, branches: list["StepState"]) -> None:
        """Store states the CFG branches recorded separately as this state's batch, in branch order."""
        for key in branches[0].tensors:
            self.tensors[key] = torch.cat([branch.tensors[key] for branch in branches])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def causal_left_pad(owner: nn.Module, x: torch.Tensor, frames: int, state: StepState | None) -> torch.Tensor:
    """Left context for a causal convolution: zeros, or the prefix's frames when ``state`` is given."""
    return F.pad(x, (frames, 0)) if state is None else state.left_padded(owner, x, frames)


@dataclass
class FlowPrefix:
    """Owns the cached first ``tokens`` prompt tokens (``frames`` mel frames) of one voice: one
    :class:`StepState` per Euler step, the prompt it was made from (to refuse another voice's), and
    on CUDA the graphs of the chunk that follows it (they read its tensors, so they go with it)."""

    tokens: int
    frames: int
    steps: list[StepState]
    prompt_tokens: torch.Tensor  # (1, tokens) the ids it covers
    embedding: torch.Tensor  # (1, 192) the raw speaker vector it was made with
    graphs: Any = None  # on CUDA: its PrefixGraphs (models/cuda/flow_prefix_graphs.py), made on first use

    def matches(self, prompt_tokens: torch.Tensor, embedding: torch.Tensor) -> bool:
        """True if this prefix was made from the start of ``prompt_tokens`` with ``embedding``."""
        if prompt_tokens.shape[1] < self.tokens:
            return False
        head = prompt_tokens[:, : self.tokens].to(self.prompt_tokens.device)
        same_voice = torch.equal(embedding.to(self.embedding.device), self.embedding)
        return same_voice and torch.equal(head, self.prompt_tokens)

    def nbytes(self) -> int:
        return sum(step.nbytes() for step in self.steps)
