"""One CosyVoice model: ``CosyVoice.from_pretrained(dir).synthesize(text, voice)`` (``cosyvoice_mac.load_model``
is the library's door: it picks the folder as the app does).

What a model is built from lives in :mod:`.constructors`; this module turns requests into audio:
text -> normalise and split into sentences -> Qwen2 BPE ids -> speech LM -> speech tokens ->
flow (CFM) -> 80-bin mel -> HiFT vocoder -> 24 kHz waveform, one sentence at a time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.device import LowMemoryChoice, between_sentences, low_memory_choice, synchronize
from cosyvoice_mac.frontend.prompt_audio import DecodedPrompt
from cosyvoice_mac.frontend.text import TextNormalizer
from cosyvoice_mac.mlx.choice import MLX, TORCH, EngineChoice
from cosyvoice_mac.models.llm.speech_lm import filter_silent_runs
from cosyvoice_mac.models.vocoder.source import GaussianSourceNoise
from cosyvoice_mac.pipeline import prompts
from cosyvoice_mac.pipeline.backend import BackendBase, sampler_settings, silence_result
from cosyvoice_mac.pipeline.batch import batch_size_for, batches_on, run_batch
from cosyvoice_mac.pipeline.constructors import pretrained_parts, random_full_size_parts
from cosyvoice_mac.pipeline.convert import convert_source
from cosyvoice_mac.pipeline.engines import mlx_settle, release_engine_memory, torch_takes_over
from cosyvoice_mac.pipeline.loading import Networks
from cosyvoice_mac.pipeline.model_dir import ModelFolder
from cosyvoice_mac.pipeline.precision_plan import PrecisionPlan, StagePick
from cosyvoice_mac.pipeline.producer import DecodeThread
from cosyvoice_mac.pipeline.speaker import PromptEncoder
from cosyvoice_mac.pipeline.streaming import (
    LOW_MEMORY_PREFIX_TOKENS,
    MAX_PREFIX_TOKENS,
    FlowPrefixCache,
    StreamingParts,
    prepare_voice_for_streaming,
    stream_segment,
)
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, PromptAudio, SpeakerPrompt, SynthesisError, SynthesisResult
from cosyvoice_mac.request import Request, Sampling
from cosyvoice_mac.versions import spec_for

STOP_CHECK_EVERY_TOKENS = 10


class CosyVoice(BackendBase):
    """One loaded model: owns the text frontend, the prompt encoder and the three networks.

    The networks are language-blind; this class is language- and mode-aware (zero-shot,
    cross-lingual, instruct) and turns requests into their inputs.
    """

    def __init__(
        self,
        *,
        version: str,
        config: dict,
        networks: Networks,
        tokenizer,
        prompt_encoder: PromptEncoder,
        device: torch.device,
        plan: PrecisionPlan,
        model_id: str,
        folder: ModelFolder | None,
        low_memory: bool | LowMemoryChoice = False,
        engine: EngineChoice = EngineChoice(TORCH),
    ):
        self.version = version
        self.spec = spec_for(version)  # what differs between the versions (versions.py)
        self.config = config
        self.networks = networks
        self.tokenizer = tokenizer
        self.normalizer = TextNormalizer(lambda text: len(tokenizer.encode(text)))
        self.prompt_encoder = prompt_encoder
        self.device = device
        self.precision = plan  # what each stage runs in, and why
        self.dtype = plan.llm_dtype  # the global dtype means the LLM's
        self.model_id = model_id
        self.folder = folder
        self.sample_rate = SAMPLE_RATE
        self.vocoder = networks.hift  # may be swapped for another implementation (Core ML)
        self.vocoder_fallbacks = 0  # jobs whose swapped-in vocoder failed and the torch one finished
        choice = low_memory if isinstance(low_memory, LowMemoryChoice) else low_memory_choice(bool(low_memory))
        self.low_memory = choice.enabled
        self.low_memory_choice = choice  # the status panel and the sidecars show it with its reason
        self.llm_weights = folder.llm_file if folder is not None else None  # llm.pt, or llm.rl.pt when asked for
        self.flow_prefixes = FlowPrefixCache()  # streaming: the last voice's flow prefix
        self.engine = engine  # MLX or PyTorch, and why not the one asked for
        # MLX: every streamed sentence's LLM on one long-lived thread (one MLX stream, not one per sentence)
        self.decode_thread = DecodeThread()

    # construction (the parts: pipeline.constructors) ------------------------------------------
    @classmethod
    def from_pretrained(
        cls, model_dir: str | Path, device: str | torch.device | None = "auto", dtype=None, **options
    ) -> "CosyVoice":
        """Load an official model folder unchanged (``random_weights`` only if asked for by name).

        ``dtype`` (else ``$COSYVOICE_DTYPE``) is the LLM's dtype; ``llm_dtype`` / ``flow_dtype`` name
        a stage's ("int8": weight-only int8 LLM). A stage not named runs in what ``precision``
        picks: ``auto`` measures this machine once (``reprobe`` again) and takes the fastest dtype
        the quality gate allows; ``float32`` runs it in float32 (see ``precision_plan``).
        ``low_memory`` None picks the mode for this machine (on at <= 12 GiB of RAM, or as
        ``$COSYVOICE_LOW_MEMORY`` says: :func:`cosyvoice_mac.device.low_memory_choice`); on, it halves
        the LLM unless named and loads the ONNX frontends only while a new prompt is encoded.
        ``engine`` ('auto', 'mlx', 'torch'; None reads ``$COSYVOICE_ENGINE``): see ``cosyvoice_mac.mlx.choice``.
        """
        return cls(**pretrained_parts(model_dir, device, dtype, **options))

    @classmethod
    def random_full_size(
        cls, version: str = "cosyvoice3", device: str | torch.device | None = "auto", dtype=None, **options
    ) -> "CosyVoice":
        """The released architecture at full size with RANDOM weights and stand-in frontends.

        For benchmarks and memory checks only: its speech is noise. Never chosen implicitly. ``seed``
        seeds the weights and the stand-ins; ``low_memory``, the dtypes, ``engine``, ``precision`` and
        ``reprobe`` as for :meth:`from_pretrained`.
        """
        return cls(**random_full_size_parts(version, device, dtype, **options))

    def use_vocoder(self, vocoder=None) -> None:
        """Swap in a vocoder with HiFT's ``inference(mel, noise=...) -> (wave, source)``; None restores torch."""
        self.vocoder = vocoder if vocoder is not None else self.networks.hift

    @property
    def flow_prefix_builds(self) -> int:
        return self.flow_prefixes.builds

    def use_torch_engine(self, reason: str) -> None:
        """Let PyTorch (MPS, then CUDA, then CPU) run this model from now on, e.g. after MLX failed a job."""
        torch_takes_over(self, reason)

    def to(self, device: str | torch.device) -> "CosyVoice":
        """Move the networks (e.g. to the CPU for a retry after a device error)."""
        self.device = torch.device(device)
        self.flow_prefixes.clear()
        self.networks.to(self.device)
        return self

    # requests -------------------------------------------------------------------------------
    def prepare_prompt(
        self,
        audio: str | Path | np.ndarray | DecodedPrompt,
        sample_rate: int | None = None,
        transcript: str | None = None,
    ) -> SpeakerPrompt:
        """Features of a prompt voice (the expensive, cacheable part of a request); decodes it at most once."""
        return self.prompt_encoder.encode(audio, sample_rate=sample_rate, transcript=transcript)

    def prepare_prompts(self, prompts: Sequence[PromptAudio]) -> list[SpeakerPrompt | SynthesisError]:
        """Features of several prompt voices in one call: each ONNX frontend loaded once for all of them."""
        return self.prompt_encoder.encode_many(prompts)

    def prepare_streaming(self, speaker: SpeakerPrompt) -> bool:
        """Compute the voice's share of streamed requests ahead of time (a few seconds on a CPU, once per voice)."""
        if speaker.model_id != self.model_id:
            raise SynthesisError("that voice was prepared for another model; upload its audio again", field="voice")
        prepare_voice_for_streaming(self.streaming_parts(), speaker)
        return True

    def streaming_parts(self) -> StreamingParts:
        """What streaming uses of this model now (its current networks; a smaller prefix in low-memory mode)."""
        return StreamingParts(
            flow=self.networks.flow,
            vocoder=self.networks.hift,
            stitcher=self.spec.stitcher,
            prefixes=self.flow_prefixes,
            max_prefix_tokens=LOW_MEMORY_PREFIX_TOKENS if self.low_memory else MAX_PREFIX_TOKENS,
            widen_flow=self.redo_flow_in_float32,
            # torch: a thread per sentence, ended with it. A long-lived thread keeps its OpenMP team, and with more
            # OpenMP threads than cores GNU OpenMP stops spinning between parallel regions: every later op of the
            # process (the non-streamed LLM step's ~1360 a token) then pays a sleep and a wake-up (issue 47).
            decode_thread=self.decode_thread if self.engine.engine == MLX else None,
            takes_turns=self.engine.engine == MLX,  # Metal: two threads must never evaluate at once
            settle_llm_step=mlx_settle() if self.engine.engine == MLX else None,
        )

    def run(
        self,
        request: Request,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        style_speakers: Mapping[str, SpeakerPrompt] | None = None,
    ) -> Iterator[SynthesisResult]:
        """Speak a valid ``request``, one result per sentence (per chunk when streaming) as it is done; a
        ``[pause]`` is a result of silence. ``style_speakers`` are the voice's recordings of a style, which its
        ``(style)`` runs are spoken with (a style without one becomes an instruction).

        Model-specific input errors (unknown markup, a prompt too short) raise before any audio.
        """
        style_speakers = dict(style_speakers or {})
        transcripts = {style: prompt.transcript for style, prompt in style_speakers.items()}
        plan = prompts.plan_request(self.version, self.normalizer, request, transcripts)
        started = time.perf_counter()
        speaker = self._speaker_for(request, speaker)
        frontend_s = time.perf_counter() - started
        run = self._run_streaming if request.stream else self._run
        sampler = self.networks.llm.make_sampler(seed=request.seed, **sampler_settings(request.sampling))
        voices = _Voices(speaker, style_speakers)
        return run(plan, voices, request.seed, sampler, should_stop or (lambda: False), frontend_s)

    def sampling_used(self, sampling: Sampling) -> dict:
        """The request's sampling settings, the model's own (its YAML's ``llm.sampling``) where it gave none."""
        own = self.networks.llm.config
        model = {"temperature": 1.0, "top_p": own.top_p, "top_k": own.top_k, "repetition_window": own.win_size}
        return {**model, **sampling.given()}

    def run_batch(
        self,
        requests: Sequence[Request],
        speakers: Sequence[SpeakerPrompt | None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        batch_size: int | None = None,
    ) -> Iterator[tuple[int, SynthesisResult | SynthesisError]]:
        """Speak several valid non-streamed requests, ``batch_size`` at once (None: :func:`.batch.batch_size_for`):
        ``(request index, result)`` per sentence, or ``(index, SynthesisError)`` for a request that fails (alone).
        Each result is the one :meth:`run` gives that request alone, within the parity tolerances."""
        speakers = list(speakers) if speakers is not None else [None] * len(requests)
        size = batch_size or batch_size_for(self.device, self.low_memory)
        should_stop = should_stop or (lambda: False)
        if size > 1 and batches_on(self.networks.llm):
            yield from run_batch(self, requests, speakers, should_stop, size)
            return
        for index, (request, speaker) in enumerate(zip(requests, speakers)):
            if should_stop():
                return
            try:
                for result in self.run(request, speaker, should_stop):
                    yield index, result
            except SynthesisError as error:
                yield index, error

    def batch_lines(self) -> int:
        """The most requests :meth:`run_batch` speaks at once here: ``batch_lines`` (the setting, or what the device
        suits), 1 where the LLM decodes one line at a time."""
        return batch_size_for(self.device, self.low_memory) if batches_on(self.networks.llm) else 1

    def run_conversion(
        self,
        request: ConversionRequest,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        source=None,
    ) -> Iterator[SynthesisResult]:
        """Re-speak ``request.source`` in the target voice (no LLM: :mod:`.convert`), one result per piece
        (per chunk when streaming). ``source`` is the recording already decoded (``decode_source``), if it is."""
        speaker = self._speaker_for(request, speaker)
        return convert_source(
            self, request, speaker, self.decoded_source(request, source), should_stop or (lambda: False)
        )

    def _run(self, request, voices, seed, sampler, should_stop, frontend_s) -> Iterator[SynthesisResult]:
        for index, segment in enumerate(request.segments):
            if should_stop():
                return
            if segment.silence_s:
                yield silence_result(segment, index, len(request.segments), self.sample_rate, seed)
                continue
            timings, notes = {"frontend": frontend_s if index == 0 else 0.0}, []
            started = time.perf_counter()
            speaker = voices.of(segment)
            tokens = self._speech_tokens(segment, speaker, sampler, should_stop, timings)
            if tokens is None:
                return
            wave = self._tokens_to_wave(tokens, speaker, segment.speed, timings, self._noise(seed, index), notes)
            yield SynthesisResult(
                audio=wave,
                sample_rate=self.sample_rate,
                speech_token_count=len(tokens),
                seconds=time.perf_counter() - started + timings["frontend"],
                text=segment.display_text,
                segment_index=index,
                segment_count=len(request.segments),
                timings=timings,
                seed=seed,
                mode=segment.mode,
                notes=notes,
            )
            self._between_sentences()

    def _run_streaming(self, request, voices, seed, sampler, should_stop, frontend_s) -> Iterator[SynthesisResult]:
        """Like ``_run`` but yields chunks as the LLM decodes (``is_final_chunk`` ends a sentence)."""
        for index, segment in enumerate(request.segments):
            if segment.silence_s:
                yield silence_result(segment, index, len(request.segments), self.sample_rate, seed)
                continue
            started = time.perf_counter()
            speaker = voices.of(segment)
            tokens = self._token_stream(segment, speaker, sampler)
            chunks = stream_segment(self.streaming_parts(), tokens, speaker, self._noise(seed, index), should_stop)
            for chunk in chunks:
                timings = {"frontend": frontend_s if index == 0 else 0.0, "first_chunk": time.perf_counter() - started}
                yield SynthesisResult(
                    audio=chunk.audio,
                    sample_rate=self.sample_rate,
                    speech_token_count=chunk.tokens_so_far,
                    seconds=time.perf_counter() - started,
                    text=segment.display_text,
                    segment_index=index,
                    segment_count=len(request.segments),
                    is_final_chunk=chunk.is_final,
                    timings=timings,
                    seed=seed,
                    mode=segment.mode,
                    notes=chunk.notes,
                )
                started = time.perf_counter()
            self._between_sentences()
            if should_stop():
                return

    def _between_sentences(self) -> None:
        """Hand the device's cached memory back: MPS's blocks, MLX's buffer cache (unified memory: the RAM)."""
        between_sentences(self.device)
        release_engine_memory(self)

    def _noise(self, seed: int, index: int):
        """A random vocoder excitation (CosyVoice2's) is seeded per sentence; a fixed one (CosyVoice3's) is kept."""
        return GaussianSourceNoise(seed=seed + index) if self.spec.random_vocoder_noise else None

    def _token_stream(self, segment, speaker, sampler) -> Iterator[int]:
        llm = self.networks.llm
        prompt_speech = speaker.speech_tokens if segment.mode == "zero_shot" else speaker.speech_tokens[:, :0]
        stream = llm.generate(
            _ids(self.tokenizer.encode(segment.llm_text)),
            _ids(self.tokenizer.encode(segment.llm_prompt_text)),
            prompt_speech,
            sampler,
        )
        return filter_silent_runs(stream, llm.silent_ids)

    @torch.inference_mode()
    def _speech_tokens(self, segment, speaker, sampler, should_stop, timings) -> list[int] | None:
        started = time.perf_counter()
        tokens: list[int] = []
        for token in self._token_stream(segment, speaker, sampler):
            tokens.append(token)
            if len(tokens) % STOP_CHECK_EVERY_TOKENS == 0 and should_stop():
                return None
        timings["llm"] = time.perf_counter() - started
        if not tokens:
            raise SynthesisError(
                f"the model produced no speech for {segment.display_text!r}; try rephrasing or another seed",
                field="text",
            )
        return tokens

    @torch.inference_mode()
    def _tokens_to_wave(self, tokens, speaker, speed, timings, noise, notes) -> np.ndarray:
        """Flow then vocoder; ``noise`` seeds CosyVoice2's random excitation (v3's is fixed)."""
        started = time.perf_counter()

        def flow_mel() -> torch.Tensor:
            flow = self.networks.flow
            device = next(flow.parameters()).device
            return flow.inference(
                torch.tensor([tokens], dtype=torch.long, device=device),
                speaker.speech_tokens.to(device),
                speaker.mel.to(device),
                speaker.embedding.to(device),
            )

        mel = flow_mel()
        if not bool(torch.isfinite(mel).all()) and self.redo_flow_in_float32(notes):
            mel = flow_mel()
        device = mel.device
        if speed != 1.0:
            mel = F.interpolate(mel, size=max(1, int(mel.shape[2] / speed)), mode="linear")
        synchronize(device)
        timings["flow"] = time.perf_counter() - started
        started = time.perf_counter()
        wave = self._vocode(mel.float(), noise, notes)
        samples = wave[0].float().cpu().numpy()
        timings["vocoder"] = time.perf_counter() - started
        return samples

    def redo_flow_in_float32(self, notes: list[str]) -> bool:
        """After a non-finite mel: widen a reduced-precision flow to float32 for good and say so in ``notes``.

        Returns False when the flow already runs in float32 (nothing to redo with).
        """
        was = self.precision.flow.choice
        if was == "float32":
            return False
        self.networks.flow.float()
        self.flow_prefixes.clear()  # the voices' prefixes were computed in the old dtype
        self.precision.flow = StagePick(
            "flow",
            "float32",
            "redo",
            f"flow float32: the {was} flow gave a non-finite mel, so it runs in float32 until the model is reloaded",
        )
        notes.append(
            f"the {was} flow gave a non-finite mel; this job was redone with a float32 flow "
            "(which the model keeps until it is reloaded)"
        )
        return True

    def _vocode(self, mel: torch.Tensor, noise, notes: list[str]) -> torch.Tensor:
        """Run the active vocoder; if a swapped-in one fails, the torch vocoder finishes the job."""
        if self.vocoder is not self.networks.hift:
            try:
                return torch.as_tensor(self.vocoder.inference(mel, noise=noise)[0])
            except Exception as error:  # a Core ML runtime failure must never fail the job
                self.vocoder_fallbacks += 1
                notes.append(f"the swapped-in vocoder failed ({type(error).__name__}: {error}); used torch")
        return self.networks.hift.inference(mel, noise=noise)[0]


class _Voices:
    """The request's prepared voice and its style recordings: the one a segment is spoken with."""

    def __init__(self, speaker: SpeakerPrompt, styles: Mapping[str, SpeakerPrompt]):
        self.speaker, self.styles = speaker, styles

    def of(self, segment) -> SpeakerPrompt:
        return self.styles.get(segment.style, self.speaker) if segment.style else self.speaker


def _ids(ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long)
