"""Prompt audio -> SpeakerPrompt: speech tokens, speaker vector and prompt mel (spec 4.3-4.7)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from cosyvoice_mac.device import single_threaded_pool
from cosyvoice_mac.frontend.features import prompt_mel
from cosyvoice_mac.frontend.prompt import align_prompt
from cosyvoice_mac.frontend.prompt_audio import DecodedPrompt, decode_prompt
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, PromptAudio, SpeakerPrompt, SynthesisError
from cosyvoice_mac.sound.limits import TOKENIZER_SAMPLE_RATE
from cosyvoice_mac.sound.problems import AudioInputError


class PromptEncoder:
    """Owns the speech tokenizer and speaker encoder (ONNX) and the prompt-mel settings.

    Feature extraction runs once per prompt voice; the engine caches its result. The speech tokens,
    the speaker vector and the prompt mel do not depend on each other, so while the speech tokenizer
    (the heaviest, one onnxruntime thread) runs in the caller's thread, the speaker vector and the
    prompt mel are made on a second core (``concurrent``; never in low-memory mode, which keeps at
    most one ONNX session in memory).
    """

    def __init__(self, speech_tokenizer, speaker_encoder, *, fmax: float | None, model_id: str):
        self.speech_tokenizer = speech_tokenizer
        self.speaker_encoder = speaker_encoder
        self.fmax = fmax
        self.model_id = model_id
        self._helper: ThreadPoolExecutor | None = None
        self._providers_used: dict[str, str | None] = {}  # by role, as each session last ran
        self.last_timings: dict[str, float] = {}  # seconds of each part of the last encode (the bench reads them)

    @property
    def concurrent(self) -> bool:
        """Whether the speaker vector and mel are made beside the speech tokens (not when a session is loaded
        only for each call: two at once would defeat the low-memory mode)."""
        return all(getattr(model, "keep_loaded", True) for model in (self.speech_tokenizer, self.speaker_encoder))

    def providers(self) -> dict[str, str | None]:
        """The onnxruntime execution provider of each frontend (``CPUExecutionProvider``, ``CUDAExecutionProvider``,
        ``CoreMLExecutionProvider``; ``stand-in`` for random-weight stand-ins). A session loaded only per call
        (low-memory mode) is not loaded to ask: it reports the provider of its last run, None before one."""
        known = {}
        for role, model in self._roles():
            loaded = getattr(model, "keep_loaded", True)
            known[role] = getattr(model, "provider", None) if loaded else self._providers_used.get(role)
        return known

    def _roles(self):
        return (("speech_tokenizer", self.speech_tokenizer), ("speaker_encoder", self.speaker_encoder))

    @property
    def tokenizer_stays_loaded(self) -> bool:
        """False in low-memory mode: the speech tokenizer is loaded for each call, unless held."""
        return getattr(self.speech_tokenizer, "keep_loaded", True)

    def tokenizer_held(self):
        """A block in which the speech tokenizer stays loaded (one load for many ``speech_tokens`` calls)."""
        return _held(self.speech_tokenizer)

    @torch.inference_mode()
    def speech_tokens(self, wave16k: torch.Tensor) -> torch.Tensor:
        """(1, N) 16 kHz audio (<= 30 s) -> (1, T) int64 CPU speech tokens: the one path a prompt's tokens and a
        converted recording's tokens (``pipeline.convert``) both take."""
        return self.speech_tokenizer.tokens(wave16k).long().cpu()

    @torch.inference_mode()
    def encode(
        self,
        prompt: str | Path | np.ndarray | DecodedPrompt,
        sample_rate: int | None = None,
        transcript: str | None = None,
    ) -> SpeakerPrompt:
        """Extract features of ``prompt`` (a file path, mono samples at ``sample_rate``, or a prompt the
        caller already decoded: it is decoded at most once, then read at 16 and 24 kHz)."""
        (outcome,) = self.encode_many([PromptAudio(prompt, sample_rate, transcript)])
        if isinstance(outcome, SynthesisError):
            raise outcome
        return outcome

    @torch.inference_mode()
    def encode_many(self, prompts: Sequence[PromptAudio]) -> list[SpeakerPrompt | SynthesisError]:
        """Features of several prompts in one call, in their order; a prompt that cannot be used gets its
        SynthesisError in its place and the others are made all the same.

        Each prompt is decoded once. Every speech-token pass then runs under one load of the tokenizer and
        every speaker vector under one load of CAM++: in low-memory mode (a session loaded per call) that is
        one load of each for the lot, one after the other, never both at once. Otherwise the speaker
        vectors and mels of all the prompts are made on the second core while the tokens are.
        ``last_timings`` holds the seconds of each part summed over the prompts.
        """
        outcomes: list[SpeakerPrompt | SynthesisError | None] = [None] * len(prompts)
        clips = {}  # index -> (16 kHz clip, 24 kHz clip) of each prompt that decoded
        for index, prompt in enumerate(prompts):
            try:
                decoded = decode_prompt(prompt.audio, prompt.sample_rate)
                clips[index] = (decoded.at(TOKENIZER_SAMPLE_RATE), decoded.at(SAMPLE_RATE))
            except AudioInputError as error:
                outcomes[index] = SynthesisError(str(error), field="prompt_audio")
        timings: dict[str, float] = {}
        if self.concurrent and clips:
            if self._helper is None:
                # one torch thread: it shares the cores with the tokenizer, and a 2-thread OpenMP team kept by
                # this long-lived thread would slow every later parallel op of the process (single_threaded_pool)
                self._helper = single_threaded_pool(1, "prompt-encoder")
            voices = self._helper.submit(self._all_voice_features, clips, timings)
            try:
                tokens = self._all_speech_tokens(clips, timings)
            finally:
                wait([voices])  # a tokenizer error is raised only once the helper is idle again
            features = voices.result()
        else:
            tokens = self._all_speech_tokens(clips, timings)
            features = self._all_voice_features(clips, timings)
        self.last_timings = timings
        for index, (clip16k, _) in clips.items():
            failed = tokens[index] if isinstance(tokens[index], SynthesisError) else features[index]
            if isinstance(failed, SynthesisError):
                outcomes[index] = failed
                continue
            outcomes[index] = self._speaker_prompt(clip16k, tokens[index], *features[index], prompts[index])
        return outcomes

    def _speaker_prompt(self, clip16k, tokens, embedding, mel, prompt: PromptAudio) -> SpeakerPrompt | SynthesisError:
        tokens, mel = align_prompt(tokens, mel)
        if tokens.shape[1] == 0:
            return SynthesisError(
                "the prompt audio is too short to take a voice from; use 3-30 s of speech", field="prompt_audio"
            )
        return SpeakerPrompt(
            speech_tokens=tokens.long().cpu(),
            mel=mel.float().cpu(),
            embedding=embedding.float().reshape(1, -1).cpu(),
            audio_hash=clip16k.content_hash,
            model_id=self.model_id,
            transcript=prompt.transcript,
            duration_s=clip16k.seconds,
        )

    def _all_speech_tokens(self, clips: dict, timings: dict[str, float]) -> dict:
        """index -> (1, T) tokens, or the SynthesisError of a prompt the tokenizer refuses; one load for all."""
        made: dict = {}
        if not clips:
            return made
        with self.tokenizer_held():
            for index, (clip16k, _) in clips.items():
                try:
                    made[index] = self._speech_tokens(clip16k.wave, timings)
                except SynthesisError as error:
                    made[index] = error
        return made

    def _all_voice_features(self, clips: dict, timings: dict[str, float]) -> dict:
        """index -> (speaker vector, prompt mel), or the SynthesisError of a prompt CAM++ refuses; one load."""
        made: dict = {}
        if not clips:
            return made
        with torch.inference_mode(), _held(self.speaker_encoder):  # inference mode is per thread: set here
            for index, (clip16k, clip24k) in clips.items():
                try:
                    made[index] = self._voice_features(clip16k.wave, clip24k.wave, timings)
                except SynthesisError as error:
                    made[index] = error
        return made

    def _speech_tokens(self, wave16k: torch.Tensor, timings: dict[str, float]) -> torch.Tensor:
        started = time.perf_counter()
        # read before the call: a per-call session (low-memory mode) is loaded for it anyway
        self._providers_used["speech_tokenizer"] = getattr(self.speech_tokenizer, "provider", None)
        tokens = self.speech_tokens(wave16k)
        timings["speech_tokens_s"] = timings.get("speech_tokens_s", 0.0) + time.perf_counter() - started
        return tokens

    def _voice_features(self, wave16k, wave24k, timings: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
        """(speaker vector ``(1, 192)``, prompt mel ``(1, F, 80)``)."""
        started = time.perf_counter()
        self._providers_used["speaker_encoder"] = getattr(self.speaker_encoder, "provider", None)
        embedding = self.speaker_encoder.embedding(wave16k)
        timings["speaker_embedding_s"] = timings.get("speaker_embedding_s", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        mel = prompt_mel(wave24k, fmax=self.fmax)
        timings["prompt_mel_s"] = timings.get("prompt_mel_s", 0.0) + time.perf_counter() - started
        return embedding, mel


def _held(model):
    """A block in which ``model`` (an on-demand frontend session) stays loaded; a plain model needs none."""
    held = getattr(type(model), "held", None)
    return model.held() if held is not None else nullcontext()
