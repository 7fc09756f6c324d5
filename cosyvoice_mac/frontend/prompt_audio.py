"""A voice prompt as the models take it: decoded once, resampled, trimmed, normalised and hashed.

The file is read by the one torch-free reader (``sound.read``), which also names what is wrong with it;
channels are averaged and the samples resampled with the project's torchaudio-equal resampler, as
upstream ``load_wav`` does. Every refusal is an ``AudioInputError`` saying its problem in the sentence
the page, the API and the CLI use (``sound.problems``).

Prompt clean-up (``trim_silence`` / ``normalize``, both on by default) is the older upstream webui's
``postprocess``: ``librosa.effects.trim(top_db=60, frame_length=440, hop_length=220)`` on the 16 kHz
signal, scale down to a 0.8 peak if louder, append 0.2 s of silence. The span kept is found once on the
16 kHz signal and cut at the same instants at any other rate, so 16 kHz and 24 kHz loads of one file
hold the same speech.

Content hash: SHA-256 of the decoded, mono, 16 kHz samples BEFORE trimming and normalising, rounded to
int16. It depends only on the recording: a WAV and a FLAC of the same PCM hash the same, and changing the
clean-up options does not change it. (Lossy re-encodings such as MP3 are different recordings.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.sound.limits import (
    MAX_SECONDS,
    MIN_SECONDS,
    NORMALIZED_PEAK,
    SILENT_PEAK,
    TAIL_SECONDS,
    TOKENIZER_SAMPLE_RATE,
    TRIM_FRAME_LENGTH,
    TRIM_HOP_LENGTH,
    TRIM_TOP_DB,
    prompt_length_problem,
)
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.read import check_resampleable, check_source_rate, read_audio
from cosyvoice_mac.sound.silence import sound_bounds

RECORDING = "the recording"  # the name of samples handed over without a file


@dataclass(frozen=True)
class LoadedAudio:
    """One recording ready for the models, and the hash that identifies the recording itself.

    wave: (1, N) float32 mono at ``sample_rate``.
    """

    wave: torch.Tensor
    sample_rate: int
    content_hash: str
    source_sample_rate: int

    @property
    def seconds(self) -> float:
        return self.wave.shape[-1] / self.sample_rate


def load_audio(
    path: str | Path,
    sample_rate: int = TOKENIZER_SAMPLE_RATE,
    *,
    trim_silence: bool = True,
    normalize: bool = True,
    min_seconds: float | None = MIN_SECONDS,
    max_seconds: float | None = MAX_SECONDS,
) -> LoadedAudio:
    """Load a voice prompt as mono float32 at ``sample_rate``; raise AudioInputError when it is unusable.

    ``min_seconds`` applies to the speech kept (after trimming); ``max_seconds`` to the returned
    audio, including the 0.2 s tail that ``normalize`` appends. ``None`` turns a limit off.
    """
    return decode_prompt(path).at(
        sample_rate, trim_silence=trim_silence, normalize=normalize, min_seconds=min_seconds, max_seconds=max_seconds
    )


class DecodedPrompt:
    """One prompt recording, decoded once: every later step (the cache key, the 16 and 24 kHz loads, the
    speech span) reads it from here instead of decoding the file again.

    source: (1, N) float32 mono at ``source_rate``; wave_16k: the same at 16 kHz (hash and trimming).
    """

    def __init__(self, source: torch.Tensor, source_rate: int, name: str):
        check_source_rate(name, source_rate, TOKENIZER_SAMPLE_RATE)
        self.source, self.source_rate, self.name = source, source_rate, name
        self.wave_16k = resample(source, source_rate, TOKENIZER_SAMPLE_RATE)
        if self.wave_16k.abs().max().item() < SILENT_PEAK:
            raise AudioInputError("silent", name=name)
        self.content_hash = audio_content_hash(self.wave_16k)
        self._span: tuple[float, float] | None = None

    @property
    def speech_span(self) -> tuple[float, float]:
        """Start and end (seconds) of the sound, found once on the 16 kHz wave."""
        if self._span is None:
            self._span = _speech_span(self.wave_16k)
        return self._span

    def at(
        self,
        sample_rate: int,
        *,
        trim_silence: bool = True,
        normalize: bool = True,
        min_seconds: float | None = MIN_SECONDS,
        max_seconds: float | None = MAX_SECONDS,
    ) -> LoadedAudio:
        """The prompt at ``sample_rate``, cleaned up and checked as ``load_audio`` documents."""
        check_resampleable(self.name, self.source_rate, sample_rate)
        wave = (
            self.wave_16k
            if sample_rate == TOKENIZER_SAMPLE_RATE
            else resample(self.source, self.source_rate, sample_rate)
        )
        if trim_silence:
            start_s, end_s = self.speech_span
            wave = wave[:, round(start_s * sample_rate) : round(end_s * sample_rate)]
        speech_seconds = wave.shape[-1] / sample_rate
        tail = round(TAIL_SECONDS * sample_rate) if normalize else 0
        verdict = prompt_length_problem(
            speech_seconds, tail / sample_rate, min_seconds=min_seconds, max_seconds=max_seconds
        )
        if verdict is not None:
            problem, limit = verdict
            raise AudioInputError(problem, name=self.name, speech=speech_seconds, limit=limit)
        if normalize:
            peak = wave.abs().max()
            if peak > NORMALIZED_PEAK:
                wave = wave / peak * NORMALIZED_PEAK
            wave = torch.cat([wave, wave.new_zeros(1, tail)], dim=1)
        return LoadedAudio(wave.contiguous(), sample_rate, self.content_hash, self.source_rate)


def decode_prompt(prompt, sample_rate: int | None = None) -> DecodedPrompt:
    """A prompt file (path), mono or (N, channels) samples at ``sample_rate``, or an already decoded prompt,
    as a DecodedPrompt; AudioInputError when it cannot be a voice prompt."""
    if isinstance(prompt, DecodedPrompt):
        return prompt
    if isinstance(prompt, np.ndarray):
        if not sample_rate or sample_rate <= 0:
            raise SynthesisError("prompt samples were given without their sample rate")
        samples = np.asarray(prompt, dtype=np.float32)
        samples = samples.reshape(-1, 1) if samples.ndim == 1 else samples  # (N, channels)
        if samples.shape[0] == 0:
            raise AudioInputError("no_samples", name=RECORDING)
        if not np.isfinite(samples).all():
            raise AudioInputError("invalid_samples", name=RECORDING)
        return DecodedPrompt(_mono(samples), int(sample_rate), RECORDING)
    path = Path(prompt)
    wave, rate = decode_audio(path)
    return DecodedPrompt(wave, rate, path.name)


def decode_audio(path: str | Path) -> tuple[torch.Tensor, int]:
    """Decode a file to ``((1, N) float32 mono in [-1, 1], file sample rate)``; AudioInputError if impossible."""
    samples, rate = read_audio(path)
    return _mono(samples), rate


def audio_content_hash(wave_16k: torch.Tensor) -> str:
    """SHA-256 (hex) of 16 kHz mono samples rounded to int16: equal for equal PCM in any container."""
    pcm = torch.round(wave_16k.detach().reshape(-1).to("cpu", torch.float32) * 32768.0).clamp(-32768, 32767)
    return hashlib.sha256(pcm.to(torch.int16).numpy().astype("<i2").tobytes()).hexdigest()


def _mono(samples: np.ndarray) -> torch.Tensor:
    """(N, C) samples as a (1, N) tensor, the mean of the channels."""
    return torch.from_numpy(np.ascontiguousarray(samples.T)).mean(dim=0, keepdim=True)


def _speech_span(wave_16k: torch.Tensor) -> tuple[float, float]:
    """Start and end (seconds) of the sound in a 16 kHz (1, N) wave, as upstream's librosa trim finds it."""
    start, end = sound_bounds(wave_16k[0].numpy(), TRIM_TOP_DB, TRIM_FRAME_LENGTH, TRIM_HOP_LENGTH)
    return start / TOKENIZER_SAMPLE_RATE, end / TOKENIZER_SAMPLE_RATE
