"""Typed values that cross the pipeline's public boundary (engine, UI and CLI use these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the UI process reads these types without loading torch
    import torch

from cosyvoice_mac.errors import SynthesisError  # noqa: E402,F401 (re-exported: the pipeline's input error)
from cosyvoice_mac.request import MODES  # noqa: E402,F401
from cosyvoice_mac.versions import SAMPLE_RATE  # noqa: E402,F401 (re-exported: the rate of every result)


@dataclass
class SpeakerPrompt:
    """Everything the models need from one prompt voice; what the speaker cache stores.

    speech_tokens: (1, P) int64 prompt speech tokens (already aligned: mel has 2P frames)
    mel: (1, 2P, 80) float32 prompt log-mel at 50 Hz (24 kHz audio)
    embedding: (1, 192) float32 raw CAM++ speaker vector (not normalised); backend-specific: the
        preview backend keeps its WORLD voice statistics here (its tokens and mel are empty)
    """

    speech_tokens: torch.Tensor
    mel: torch.Tensor
    embedding: torch.Tensor
    audio_hash: str
    model_id: str
    transcript: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class PromptAudio:
    """One prompt to prepare among several (``Backend.prepare_prompts``): a path, mono samples at
    ``sample_rate``, or an ``audio.DecodedPrompt``, and the transcript its features are kept with."""

    audio: object
    sample_rate: int | None = None
    transcript: str | None = None


@dataclass
class SynthesisResult:
    """One finished sentence (or, when streaming, one chunk) of synthesised speech."""

    audio: np.ndarray  # (N,) float32 in [-0.99, 0.99]
    sample_rate: int
    speech_token_count: int
    seconds: float  # wall time spent producing this piece
    text: str
    segment_index: int
    segment_count: int
    is_final_chunk: bool = True
    seed: int | None = None  # the sampling seed used (reuse it to get the same audio again)
    mode: str = "zero_shot"
    timings: dict[str, float] = field(default_factory=dict)  # per stage: frontend, llm, flow, vocoder
    notes: list[str] = field(default_factory=list)  # things a user should know (e.g. a vocoder fallback)
    words: list | None = None  # the sentence's words (``takes.Word``: word, start, end in this audio) once timed
    batch_size: int = 1  # lines spoken at once with this one (long-form jobs batch them: pipeline/batch.py)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def real_time_factor(self) -> float:
        return self.seconds / self.duration_s if len(self.audio) else float("inf")
