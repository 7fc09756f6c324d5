"""Prompt audio -> 25 Hz FSQ speech tokens, with the official ONNX S3 tokenizer or a stand-in.

The official ``speech_tokenizer_v2.onnx`` / ``speech_tokenizer_v3.onnx`` take a whisper log-mel
``(1, 128, T)`` float32 and its length ``(1,)`` int32 and return integer tokens ``(1, ~T/4)``.
The two versions share this interface but their codes are not interchangeable. We run the official
graph with onnxruntime, on the provider :mod:`cosyvoice_mac.frontend.onnx_session` picks (the CPU, or
the networks' accelerator where onnxruntime has its provider), and address the inputs by position,
because the exported names are not part of any contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cosyvoice_mac.checkpoint import CheckpointError
from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.features import WHISPER_HOP, WHISPER_N_MELS, whisper_log_mel
from cosyvoice_mac.frontend.onnx_session import open_session

SAMPLE_RATE = 16000
MAX_PROMPT_SECONDS = 30.0
MEL_FRAMES_PER_TOKEN = 4
# One token needs four 10 ms mel frames.
MIN_PROMPT_SAMPLES = MEL_FRAMES_PER_TOKEN * WHISPER_HOP


def check_prompt_wave(wave16k: torch.Tensor) -> torch.Tensor:
    """Validate ``(1, N)`` 16 kHz float audio for tokenisation; return it as float32 CPU.

    Raises SynthesisError for prompts longer than 30 s (the tokenizer's limit) or shorter than
    one token (40 ms).
    """
    if not isinstance(wave16k, torch.Tensor) or wave16k.dim() != 2 or wave16k.shape[0] != 1:
        shape = tuple(wave16k.shape) if isinstance(wave16k, torch.Tensor) else type(wave16k).__name__
        raise ValueError(f"the speech tokenizer needs a mono 16 kHz waveform of shape (1, N), got {shape}")
    seconds = wave16k.shape[1] / SAMPLE_RATE
    if seconds > MAX_PROMPT_SECONDS:
        raise SynthesisError(
            f"the prompt audio is {seconds:.1f} s long; the speech tokenizer accepts at most "
            f"{MAX_PROMPT_SECONDS:.0f} s. Trim the prompt (5-15 s of clean speech works best).",
            field="prompt_audio",
        )
    if wave16k.shape[1] < MIN_PROMPT_SAMPLES:
        raise SynthesisError(
            f"the prompt audio is {seconds * 1000:.0f} ms long, too short for a single speech token; "
            "use a few seconds of speech.",
            field="prompt_audio",
        )
    return wave16k.detach().cpu().float()


class SpeechTokenizer:
    """Owns one onnxruntime session of an official S3 speech tokenizer (v2 or v3).

    ``vocab_size``, when given, is checked against every returned token (6561 for the real
    models), so a tokenizer of the wrong model version fails here rather than in an embedding.
    ``device_type`` is where the networks run (the session joins them where onnxruntime can);
    ``provider`` and ``provider_reason`` say where it runs and why.
    """

    is_stand_in = False

    def __init__(
        self,
        onnx_path: str | Path,
        intra_op_threads: int = 1,
        vocab_size: int | None = None,
        *,
        map_weights: bool = False,
        device_type: str = "cpu",
    ):
        self.path = Path(onnx_path)
        self.vocab_size = vocab_size
        self._session, self.provider, self.provider_reason = open_session(
            self.path, intra_op_threads, "speech tokenizer", map_weights=map_weights, device_type=device_type
        )
        inputs = self._session.get_inputs()
        if len(inputs) != 2:
            raise CheckpointError(f"{self.path} has {len(inputs)} inputs; a speech tokenizer takes (log-mel, length)")
        self._mel_input, self._length_input = inputs[0].name, inputs[1].name

    @torch.inference_mode()
    def tokens(self, wave16k: torch.Tensor) -> torch.Tensor:
        """``(1, N)`` 16 kHz float audio (<= 30 s) -> ``(1, T_tok)`` int64 speech tokens."""
        mel = whisper_log_mel(check_prompt_wave(wave16k))  # (1, 128, T)
        feeds = {
            self._mel_input: mel.numpy(),
            self._length_input: np.array([mel.shape[2]], dtype=np.int32),
        }
        raw = self._session.run(None, feeds)[0]
        if not np.issubdtype(raw.dtype, np.integer):
            raise CheckpointError(f"{self.path} returned {raw.dtype} values; a speech tokenizer returns integers")
        tokens = torch.from_numpy(np.ascontiguousarray(raw).reshape(1, -1).astype(np.int64))
        _check_token_range(tokens, self.vocab_size, str(self.path))
        return tokens


class RandomSpeechTokenizer:
    """STAND-IN for runs without the official tokenizer (random-weight models, tests, demos).

    A fixed seeded projection of the whisper log-mel, 4-frame average pooled and argmaxed over
    ``vocab_size`` codes: a deterministic function of the audio with the real shapes, limits and
    dtype, and no linguistic meaning at all. Never chosen implicitly: a caller constructs it.
    """

    is_stand_in = True
    provider, provider_reason = "stand-in", "random-weight model: no ONNX session"

    def __init__(self, vocab_size: int = 6561, seed: int = 0):
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.vocab_size = vocab_size
        generator = torch.Generator().manual_seed(seed)
        self._projection = torch.randn(vocab_size, WHISPER_N_MELS, generator=generator)

    @torch.inference_mode()
    def tokens(self, wave16k: torch.Tensor) -> torch.Tensor:
        """``(1, N)`` 16 kHz float audio (<= 30 s) -> ``(1, T // 4)`` int64 pseudo tokens."""
        mel = whisper_log_mel(check_prompt_wave(wave16k))
        pooled = F.avg_pool1d(mel, MEL_FRAMES_PER_TOKEN, MEL_FRAMES_PER_TOKEN)  # (1, 128, T // 4)
        return (self._projection @ pooled).argmax(dim=1)


def _check_token_range(tokens: torch.Tensor, vocab_size: int | None, source: str) -> None:
    if vocab_size is None or tokens.numel() == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise CheckpointError(
            f"{source} produced tokens in [{low}, {high}] but the model expects [0, {vocab_size}); "
            "is this the speech tokenizer of the same model version?"
        )
