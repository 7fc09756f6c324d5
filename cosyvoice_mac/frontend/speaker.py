"""Prompt audio -> 192-d speaker vector, with the official CAM++ ONNX model or a stand-in.

``campplus.onnx`` (identical in the CosyVoice2 and CosyVoice3 releases) takes the per-utterance
mean-normalised Kaldi fbank ``(1, T, 80)`` of the 16 kHz prompt in [-1, 1] scale and returns the
raw (not L2-normalised) embedding; the flow normalises it later. The LLMs do not use it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.checkpoint import CheckpointError
from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.features import FBANK_FRAME_LENGTH, FBANK_N_MELS, kaldi_fbank_float64
from cosyvoice_mac.frontend.onnx_session import open_session

EMBEDDING_DIM = 192


def normalised_fbank(wave16k: torch.Tensor) -> torch.Tensor:
    """``(1, N)`` 16 kHz float audio -> ``(T, 80)`` float32 fbank minus its mean over time.

    The mean is taken and subtracted in float64 (the fbank's own precision), so each value is rounded
    to float32 once. Raises SynthesisError for audio shorter than one 25 ms frame.
    """
    if isinstance(wave16k, torch.Tensor) and wave16k.dim() == 2 and wave16k.shape[1] < FBANK_FRAME_LENGTH:
        raise SynthesisError(
            f"the prompt audio has {wave16k.shape[1]} samples at 16 kHz, too short for a speaker "
            "embedding; use a few seconds of speech.",
            field="prompt_audio",
        )
    features = kaldi_fbank_float64(wave16k)  # cpu-only: a CPU tensor, see kaldi_fbank_float64
    return (features - features.mean(dim=0, keepdim=True)).float()


class SpeakerEncoder:
    """Owns one onnxruntime session of the official CAM++ speaker encoder (``campplus.onnx``), on the provider
    :func:`cosyvoice_mac.frontend.onnx_session.open_session` picks for ``device_type`` (``provider`` names it)."""

    is_stand_in = False

    def __init__(
        self, onnx_path: str | Path, intra_op_threads: int = 1, *, map_weights: bool = False, device_type: str = "cpu"
    ):
        self.path = Path(onnx_path)
        self._session, self.provider, self.provider_reason = open_session(
            self.path, intra_op_threads, "speaker encoder", map_weights=map_weights, device_type=device_type
        )
        self._input = self._session.get_inputs()[0].name

    @torch.inference_mode()
    def embedding(self, wave16k: torch.Tensor) -> torch.Tensor:
        """``(1, N)`` 16 kHz float audio in [-1, 1] -> ``(1, 192)`` float32 speaker vector."""
        features = normalised_fbank(wave16k).unsqueeze(0)  # (1, T, 80)
        raw = self._session.run(None, {self._input: features.numpy()})[0]
        if raw.size != EMBEDDING_DIM:
            raise CheckpointError(
                f"{self.path} returned {raw.size} values; CAM++ returns a {EMBEDDING_DIM}-d speaker vector"
            )
        return torch.from_numpy(np.asarray(raw, dtype=np.float32).reshape(1, EMBEDDING_DIM))


class RandomSpeakerEncoder:
    """STAND-IN for runs without ``campplus.onnx`` (random-weight models, tests, demos).

    ``tanh`` of a fixed seeded projection of the per-bin maximum and RMS over time of the same
    normalised fbank CAM++ gets: a deterministic function of the audio with the real shape and
    dtype, and no speaker identity at all. Never chosen implicitly: a caller constructs it.
    """

    is_stand_in = True
    provider, provider_reason = "stand-in", "random-weight model: no ONNX session"

    def __init__(self, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self._projection = torch.randn(EMBEDDING_DIM, 2 * FBANK_N_MELS, generator=generator)
        # fbank summaries are ~10 in size: keep tanh out of saturation so outputs follow the audio.
        self._projection *= 0.1 / (2 * FBANK_N_MELS) ** 0.5

    @torch.inference_mode()
    def embedding(self, wave16k: torch.Tensor) -> torch.Tensor:
        """``(1, N)`` 16 kHz float audio in [-1, 1] -> ``(1, 192)`` float32 pseudo speaker vector."""
        features = normalised_fbank(wave16k)  # (T, 80)
        summary = torch.cat([features.amax(dim=0), features.pow(2).mean(dim=0).sqrt()])
        return torch.tanh(self._projection @ summary).unsqueeze(0)
