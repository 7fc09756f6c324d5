"""What the worker needs from a voice backend, and the one base every backend shares.

``CosyVoice`` and the preview voice satisfy :class:`Backend`; the worker calls nothing else, so it never
probes a backend with ``getattr``/``hasattr``. :class:`BackendBase` gives the answers of a backend that
lacks a part (no voice of its own, no precision plan, ...) and ``synthesize(text, voice, ...)``, the Python
API: it builds a :class:`~cosyvoice_mac.request.Request` (the same rules as the page and the CLI) and runs it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.errors import InputError
from cosyvoice_mac.mlx.choice import TORCH, EngineChoice
from cosyvoice_mac.pipeline.types import PromptAudio, SpeakerPrompt, SynthesisError, SynthesisResult
from cosyvoice_mac.request import Request, Sampling, Voice

if TYPE_CHECKING:
    import torch

    from cosyvoice_mac.device import LowMemoryChoice
    from cosyvoice_mac.pipeline.precision_plan import PrecisionPlan


_SAMPLER_NAMES = {"repetition_window": "win_size"}  # the request's name -> the sampler's (upstream's)


def sampler_settings(sampling: Sampling) -> dict:
    """The sampler's keyword overrides for the settings a request gave (none: the model's own sampler)."""
    return {_SAMPLER_NAMES.get(name, name): value for name, value in sampling.given().items()}


def silence_result(segment, index: int, count: int, sample_rate: int, seed: int) -> SynthesisResult:
    """A ``[pause]`` segment's piece: ``segment.silence_s`` of digital silence (no speech tokens drawn)."""
    return SynthesisResult(
        audio=np.zeros(round(segment.silence_s * sample_rate), np.float32),
        sample_rate=sample_rate,
        speech_token_count=0,
        seconds=0.0,
        text="",
        segment_index=index,
        segment_count=count,
        seed=seed,
        mode=segment.mode,
    )


@runtime_checkable
class Backend(Protocol):
    """A loaded voice model as the worker sees it.

    ``version`` names the model family ("cosyvoice3", "cosyvoice2", "preview"); ``model_id`` keys the speaker
    cache; ``device`` is where it computes now and ``dtype`` the LLM's precision. What the status panel and
    the sidecars report: ``engine`` (MLX or PyTorch, and why), ``precision`` (what each stage runs in, None
    without a plan), ``low_memory_choice`` (None without that mode), ``llm_weights`` (the LLM file, None
    without one) and ``flow_prefix_builds`` (streaming flow prefixes computed so far).
    """

    version: str
    model_id: str
    sample_rate: int
    device: "torch.device"
    dtype: "torch.dtype"
    engine: EngineChoice
    precision: "PrecisionPlan | None"
    low_memory_choice: "LowMemoryChoice | None"
    llm_weights: str | None
    flow_prefix_builds: int

    def prepare_prompt(self, prompt, sample_rate: int | None = None, transcript: str | None = None) -> SpeakerPrompt:
        """Features of a prompt (a path, samples, or an ``audio.DecodedPrompt``): the cacheable part."""

    def prepare_prompts(self, prompts: Sequence[PromptAudio]) -> list[SpeakerPrompt | SynthesisError]:
        """Features of several prompts in one call, in order; an unusable prompt gets its error in its place."""

    def prepare_streaming(self, speaker: SpeakerPrompt) -> bool:
        """Compute the voice's share of streamed requests now; False when the backend has none."""

    def stock_speaker(self) -> SpeakerPrompt | None:
        """The backend's own voice (for ``Voice.builtin()``); None when it has none."""

    def sampling_used(self, sampling: Sampling) -> dict:
        """The sampling settings a request with ``sampling`` is drawn with (the sidecar records them)."""

    def run(
        self,
        request: Request,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        style_speakers: Mapping[str, SpeakerPrompt] | None = None,
    ) -> Iterator[SynthesisResult]:
        """Speak a valid request; ``speaker`` None prepares the request's recording first. ``style_speakers``:
        the voice's recordings by style, which its ``(style)`` runs are spoken with (none: instructions)."""

    def run_conversion(
        self,
        request: ConversionRequest,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        source=None,
    ) -> Iterator[SynthesisResult]:
        """Re-speak a valid conversion request's recording in its voice; ``source`` the recording already
        decoded (``frontend.source_audio.DecodedSource``) or None."""

    def to(self, device) -> "Backend":
        """Move to ``device`` (the worker's CPU retry)."""

    def use_vocoder(self, vocoder=None) -> None:
        """Swap in another vocoder (Core ML); None restores the backend's own."""

    def use_torch_engine(self, reason: str) -> None:
        """Let PyTorch run the model from now on (MLX failed a job: ``reason``)."""


class BackendBase:
    """The base of every Backend: the keyword API over ``run``, and the answers of a backend without a
    part (a subclass that has it sets or overrides it). Owns nothing."""

    model_id: str
    engine: EngineChoice = EngineChoice(TORCH)
    precision: "PrecisionPlan | None" = None
    low_memory_choice: "LowMemoryChoice | None" = None
    llm_weights: str | None = None
    flow_prefix_builds: int = 0
    # The take check the library door hands in (``engine.takes.TakeChecker``: the recogniser lives above this
    # layer); None: ``synthesize`` yields the sentences unchecked.
    take_checker = None

    def stock_speaker(self) -> SpeakerPrompt | None:
        return None

    def sampling_used(self, sampling: Sampling) -> dict:
        """What a request's sampling settings came to: the model's own where it gave none (a backend that
        draws no tokens, the preview voice, records what was asked, None for the model's own)."""
        return sampling.as_dict()

    def prepare_prompts(self, prompts: Sequence[PromptAudio]) -> list[SpeakerPrompt | SynthesisError]:
        """One prompt after another (a backend with sessions to share, CosyVoice, overrides this)."""
        outcomes: list[SpeakerPrompt | SynthesisError] = []
        for prompt in prompts:
            try:
                outcomes.append(self.prepare_prompt(prompt.audio, prompt.sample_rate, prompt.transcript))
            except SynthesisError as error:
                outcomes.append(error)
        return outcomes

    def run_conversion(self, request, speaker=None, should_stop=None, source=None) -> Iterator[SynthesisResult]:
        """A backend without voice conversion says so (CosyVoice and the preview voice override this)."""
        raise SynthesisError(f"the {self.version} voice cannot convert recordings; load CosyVoice or the preview voice")

    def use_torch_engine(self, reason: str) -> None:
        """Already on PyTorch (a backend with one implementation): only the reason is kept."""
        self.engine = EngineChoice(TORCH, reason)

    def synthesize(
        self,
        text: str,
        voice: Voice | SpeakerPrompt | str | Path | np.ndarray | None = None,
        *,
        instruct: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        stream: bool = False,
        mode: str | None = None,
        sampling: Sampling | None = None,
        should_stop: Callable[[], bool] | None = None,
        prompt_audio: str | Path | np.ndarray | None = None,
        prompt_text: str | None = None,
        prompt_sample_rate: int | None = None,
        speaker: SpeakerPrompt | None = None,
        check: bool | None = None,
    ) -> Iterator[SynthesisResult]:
        """Speak ``text`` in ``voice``; yield one result per sentence (or streamed chunk) as it is done.

        ``voice`` is a :class:`Voice`, a prepared SpeakerPrompt (its transcript is honoured), or a prompt
        file. ``prompt_audio`` / ``prompt_text`` / ``speaker`` say the same in keywords. The mode follows
        the request rules: an instruction -> instruct, a transcript -> zero-shot, else cross-lingual.
        ``text`` may hold inline markup (``[pause 500ms]``, ``[speed 1.2]``, ``(happy)``; docs/page.md);
        ``sampling`` sets how the speech tokens are drawn (None: the model's own).
        Bad input raises a CosyVoiceError (RequestError, SynthesisError) before any audio is produced.
        With a ``take_checker`` (``load_model`` hands one in), each sentence is checked and retaken when it fails
        and carries its ``words``; ``check`` False skips that (None: as the ``check`` setting says).
        """
        if isinstance(voice, SpeakerPrompt):
            voice, speaker = None, voice
        if voice is None and prompt_audio is not None:
            voice = prompt_audio
        if isinstance(voice, (str, Path)):
            voice = Voice.recording(voice)
        elif isinstance(voice, np.ndarray):
            voice = Voice.from_samples(voice, prompt_sample_rate)
        if voice is None and speaker is not None:
            voice = Voice(prepared=speaker.audio_hash, transcript=speaker.transcript)
        if voice is not None and prompt_text is not None:
            voice = replace(voice, transcript=prompt_text)
        request = Request.build(
            text,
            voice,
            mode=mode,
            instruct=instruct,
            seed=seed,
            speed=speed,
            stream=stream,
            sampling=sampling,
            check=check,
        )
        results = self.run(request, speaker, should_stop)
        checker = self.take_checker
        if checker is None or not checker.wanted(self, request, False):
            return results
        return checker.checked(self, request, speaker, results, should_stop or (lambda: False))

    def convert(
        self,
        source: str | Path | np.ndarray,
        voice: Voice | SpeakerPrompt | str | Path | None = None,
        *,
        sample_rate: int | None = None,
        speed: float = 1.0,
        stream: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[SynthesisResult]:
        """Re-speak the recording ``source`` (a file, or samples at ``sample_rate``) in ``voice`` (a Voice, a
        prepared SpeakerPrompt or a prompt file), its words and timing kept; one result per piece (chunk).

        The same input gives the same output. Bad input raises a CosyVoiceError before any audio.
        """
        speaker = voice if isinstance(voice, SpeakerPrompt) else None
        if speaker is not None:
            voice = Voice(prepared=speaker.audio_hash)
        elif isinstance(voice, (str, Path)):
            voice = Voice.recording(voice)
        elif voice is None:
            voice = Voice.builtin()
        request = ConversionRequest.build(source, voice, sample_rate=sample_rate, speed=speed, stream=stream)
        return self.run_conversion(request, speaker, should_stop)

    @staticmethod
    def decoded_source(request: ConversionRequest, source=None):
        """``source`` (already decoded), else the request's recording decoded and planned into pieces; a
        recording that cannot be converted raises its SynthesisError here, before any audio."""
        from cosyvoice_mac.frontend.source_audio import decode_source

        try:
            return decode_source(request.source if source is None else source)
        except InputError as error:  # about the recording to convert: its field, whatever the reader named
            raise SynthesisError(str(error), field="source") from error

    def _speaker_for(self, request: Request, speaker: SpeakerPrompt | None) -> SpeakerPrompt:
        """The prepared voice for ``request``: ``speaker`` when given (it must be this model's), else
        the request's recording, decoded once and encoded."""
        if speaker is None:
            voice = request.voice
            if voice.kind == "stock" and (stock := self.stock_speaker()) is not None:
                return stock
            if voice.kind not in ("audio", "samples"):
                raise SynthesisError(
                    "a saved voice is spoken through the engine, which keeps the voice library", field="voice"
                )
            return self.prepare_prompt(
                voice.audio if voice.kind == "audio" else voice.samples,
                sample_rate=voice.sample_rate,
                transcript=request.transcript,
            )
        if speaker.model_id != self.model_id:
            raise SynthesisError("that voice was prepared for another model; upload its audio again", field="voice")
        return speaker
