"""Prompt audio -> SpeakerPrompt: speech tokens, speaker vector and prompt mel (spec 4.3-4.7)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.frontend.features import prompt_mel
from cosyvoice_mac.frontend.prompt import align_prompt
from cosyvoice_mac.frontend.prompt_audio import DecodedPrompt, decode_prompt
from cosyvoice_mac.pipeline.types import SpeakerPrompt, SynthesisError
from cosyvoice_mac.sound.problems import AudioInputError

TOKENIZER_RATE = 16000
MODEL_RATE = 24000


class PromptEncoder:
    """Owns the speech tokenizer and speaker encoder (ONNX, CPU) and the prompt-mel settings.

    Feature extraction runs once per prompt voice on the CPU; the engine caches its result.
    """

    def __init__(self, speech_tokenizer, speaker_encoder, *, fmax: float | None, model_id: str):
        self.speech_tokenizer = speech_tokenizer
        self.speaker_encoder = speaker_encoder
        self.fmax = fmax
        self.model_id = model_id

    @torch.inference_mode()
    def encode(
        self,
        prompt: str | Path | np.ndarray | DecodedPrompt,
        sample_rate: int | None = None,
        transcript: str | None = None,
    ) -> SpeakerPrompt:
        """Extract features of ``prompt`` (a file path, mono samples at ``sample_rate``, or a prompt the
        caller already decoded: it is decoded at most once, then read at 16 and 24 kHz)."""
        try:
            decoded = decode_prompt(prompt, sample_rate)
            clip16k, clip24k = decoded.at(TOKENIZER_RATE), decoded.at(MODEL_RATE)
        except AudioInputError as error:
            raise SynthesisError(str(error)) from error
        wave16k, wave24k = clip16k.wave, clip24k.wave
        tokens = self.speech_tokenizer.tokens(wave16k)
        embedding = self.speaker_encoder.embedding(wave16k)
        mel = prompt_mel(wave24k, fmax=self.fmax)
        tokens, mel = align_prompt(tokens, mel)
        if tokens.shape[1] == 0:
            raise SynthesisError("the prompt audio is too short to take a voice from; use 3-30 s of speech")
        return SpeakerPrompt(
            speech_tokens=tokens.long().cpu(),
            mel=mel.float().cpu(),
            embedding=embedding.float().reshape(1, -1).cpu(),
            audio_hash=clip16k.content_hash,
            model_id=self.model_id,
            transcript=transcript,
            duration_s=clip16k.seconds,
        )
