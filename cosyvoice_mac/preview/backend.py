"""The preview engine: speaks without CosyVoice weights, with the same interface as ``CosyVoice``.

text -> normalise and split into sentences -> base voice (Piper for English, espeak-ng pinyin for Chinese)
-> WORLD analysis -> pitch, envelope statistics and formants moved toward the prompt -> 24 kHz waveform.

The prompt's share (:meth:`PreviewVoice.prepare_prompt`, what the speaker cache stores) is the prompt's
WORLD statistics, ``VoiceStats.to_vector()``, as ``SpeakerPrompt.embedding`` (1, STATS_VECTOR_SIZE);
``speech_tokens`` (1, 0) and ``mel`` (1, 0, 80) are empty. ``model_id`` names the statistics layout, so the
cache never mixes them with CosyVoice features. Everything runs on the CPU.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Iterator, Mapping

import numpy as np
import torch

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.frontend.prompt_audio import decode_prompt
from cosyvoice_mac.frontend.text import TextNormalizer, detect_language
from cosyvoice_mac.pipeline import prompts
from cosyvoice_mac.pipeline.backend import BackendBase, silence_result
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SpeakerPrompt, SynthesisError, SynthesisResult
from cosyvoice_mac.preview import world_convert
from cosyvoice_mac.preview.kept_base_voice import kept_or_measured, kept_path
from cosyvoice_mac.preview.labels import PREVIEW, PREVIEW_NOTE
from cosyvoice_mac.preview.limits import MARKUP, instruction_note, markup_example, markup_note
from cosyvoice_mac.preview.mandarin import MandarinSpeaker, MandarinUnavailable
from cosyvoice_mac.preview.piper_tts import PiperSpeaker
from cosyvoice_mac.request import Request
from cosyvoice_mac.sound.limits import prompt_length_problem
from cosyvoice_mac.sound.problems import AudioInputError, sentence

CONVERSION_VERSION = 1  # part of model_id: bump when the statistics layout or the conversion changes
TARGET_RMS = 0.1  # -20 dBFS over speech frames
MAX_PEAK = 0.95
HIGH_VOICE_HZ = 165.0  # prompts above this median pitch get espeak's female Mandarin variant
ENGLISH_REFERENCE = (
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
    "It is easy to tell the depth of a well."
)
MANDARIN_REFERENCE = "今天天气很好，我们一起去公园散步吧。他的声音听起来非常温和。请把窗户打开。"


def _count_tokens(text: str) -> int:
    """Segment length for English splitting: words and punctuation marks (close to BPE token counts)."""
    return len(re.findall(r"\w+|[^\w\s]", text))


class PreviewVoice(BackendBase):
    """Owns the base voices, their WORLD reference statistics and the text normaliser.

    Base voices (and their statistics) load on first use, so building this object is cheap and a
    machine without espeak-ng only fails on Chinese text, with a message saying what to install.
    """

    version = PREVIEW
    sample_rate = SAMPLE_RATE

    def __init__(self, english: PiperSpeaker | None = None, mandarin: MandarinSpeaker | None = None):
        self._english, self._mandarin = english, mandarin
        self._mandarin_error: str | None = None
        self._base_models: dict[str, world_convert.BaseVoiceModel] = {}
        self._lock = threading.Lock()
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.model_id = f"preview-piper-joe-medium-world-v{CONVERSION_VERSION}"
        self.normalizer = TextNormalizer(_count_tokens)
        self.vocoder_fallbacks = 0

    @classmethod
    def from_pretrained(
        cls,
        model_dir=None,
        device: str | torch.device | None = "auto",
        dtype=None,
        **_unused,
    ) -> "PreviewVoice":
        """Same signature as ``CosyVoice.from_pretrained``: needs no model folder and always runs on the CPU."""
        voice = cls()
        voice.english  # fail now, with the install command, if Piper is missing
        return voice

    def to(self, device: str | torch.device) -> "PreviewVoice":
        """No-op: ONNX Piper and WORLD run on the CPU whatever device is asked for."""
        return self

    def use_vocoder(self, vocoder=None) -> None:
        """No-op: the WORLD vocoder cannot be swapped."""

    # base voices --------------------------------------------------------------------------------
    @property
    def english(self) -> PiperSpeaker:
        with self._lock:
            if self._english is None:
                # The worker's thread budget (--torch-threads; torch's default, the cores, when not set)
                self._english = PiperSpeaker(threads=torch.get_num_threads())
            return self._english

    def mandarin(self) -> MandarinSpeaker:
        with self._lock:
            if self._mandarin is None:
                if self._mandarin_error is None:
                    try:
                        self._mandarin = MandarinSpeaker()
                    except MandarinUnavailable as error:
                        self._mandarin_error = str(error)
                if self._mandarin is None:
                    raise SynthesisError(self._mandarin_error)
            return self._mandarin

    def _base_model(self, key: str) -> world_convert.BaseVoiceModel:
        """WORLD statistics of one base voice ("en", "zh-low", "zh-high"): once per process, and the English
        voice's kept in the cache folder for the next process (:mod:`cosyvoice_mac.preview.kept_base_voice`)."""
        with self._lock:
            model = self._base_models.get(key)
        if model is None:
            text = ENGLISH_REFERENCE if key == "en" else MANDARIN_REFERENCE

            def measure() -> world_convert.BaseVoiceModel:
                spoken = self._speak(key, text, seed=0, speed=1.0)
                return world_convert.BaseVoiceModel.measure(
                    world_convert.analyse(spoken.samples, spoken.sample_rate), spoken.sample_rate
                )

            # espeak-ng's output has no identity to key it by (its version and voice data): measured each time
            kept = kept_path(self.english.identity, text, CONVERSION_VERSION) if key == "en" else None
            model = kept_or_measured(kept, measure)
            with self._lock:
                self._base_models[key] = model
        return model

    def _speak(self, key: str, text: str, seed: int, speed: float):
        if key == "en":
            return self.english.speak(text, seed=seed, speed=speed)
        return self.mandarin().speak(text, seed=seed, speed=speed, variant=key.split("-")[1])

    # requests -----------------------------------------------------------------------------------
    def prepare_prompt(
        self, audio_input, sample_rate: int | None = None, transcript: str | None = None
    ) -> SpeakerPrompt:
        """WORLD statistics of a prompt voice (a path, samples or a DecodedPrompt; silence trimmed by Silero VAD)."""
        from cosyvoice_mac.frontend import vad

        try:
            clip = decode_prompt(audio_input, sample_rate).at(
                world_convert.ANALYSIS_RATE, trim_silence=False, normalize=False, min_seconds=None, max_seconds=None
            )
        except AudioInputError as error:
            raise SynthesisError(str(error), field="prompt_audio") from error
        samples = vad.trim_silence(clip.wave[0].numpy(), clip.sample_rate)
        seconds = len(samples) / clip.sample_rate
        speech = {"name": "the prompt", "speech": seconds}  # measured after Silero's trim, said as the check says it
        verdict = prompt_length_problem(seconds, tail_seconds=0.0)  # nothing is appended to a WORLD prompt
        if verdict is not None:
            problem, limit = verdict
            raise SynthesisError(sentence(problem, {**speech, "limit": limit}), field="prompt_audio")
        try:
            stats = world_convert.voice_stats(world_convert.analyse(samples, clip.sample_rate), clip.source_sample_rate)
        except world_convert.ConversionError as error:
            raise SynthesisError(
                f"no voice to copy in the prompt ({error}); record someone speaking", field="prompt_audio"
            ) from error
        return SpeakerPrompt(
            speech_tokens=torch.zeros(1, 0, dtype=torch.long),
            mel=torch.zeros(1, 0, 80),  # no prompt tokens, so no aligned mel either
            embedding=torch.from_numpy(stats.to_vector())[None],
            audio_hash=clip.content_hash,
            model_id=self.model_id,
            transcript=transcript,
            duration_s=seconds,
        )

    def prepare_streaming(self, speaker: SpeakerPrompt) -> bool:
        """Nothing to prepare: the preview voice streams whole sentences."""
        return False

    def stock_speaker(self) -> SpeakerPrompt:
        """The English base voice itself as the target: a request with no prompt recording (the engine's
        built-in preview voice) speaks Piper's voice, converted toward its own statistics."""
        stats = self._base_model("en").stats
        vector = torch.from_numpy(stats.to_vector())[None]
        return SpeakerPrompt(
            speech_tokens=torch.zeros(1, 0, dtype=torch.long),
            mel=torch.zeros(1, 0, 80),
            embedding=vector,
            audio_hash=f"stock-v{CONVERSION_VERSION}",
            model_id=self.model_id,
            transcript=None,
            duration_s=0.0,
        )

    def run(
        self,
        request: Request,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        style_speakers: Mapping[str, SpeakerPrompt] | None = None,
    ) -> Iterator[SynthesisResult]:
        """Speak a valid request in a voice moved toward the prompt's; one result per sentence, and one of
        silence per ``[pause]``; a ``[speed]`` run is spoken at its speed.

        Text is planned as for CosyVoice3 (same markup check, same messages), so a request that works here
        works there. ``stream`` yields the same sentence-sized pieces. Instructions, style tags, sampling
        settings and model markup are not understood here (a note says so).
        """
        style_speakers = dict(style_speakers or {})
        try:  # checked as for CosyVoice3 (same limits, same messages)
            transcripts = {style: prompt.transcript for style, prompt in style_speakers.items()}
            plan = prompts.plan_request("cosyvoice3", self.normalizer, request, transcripts)
        except SynthesisError as error:  # say which voice refused it: this one, by CosyVoice3's rules
            raise SynthesisError(
                str(error).replace("for cosyvoice3:", "(the preview voice accepts what CosyVoice3 accepts):", 1),
                field=error.field,
            ) from error
        texts = [segment.display_text for segment in plan.segments]
        spoken = [re.sub(r"\s+", " ", MARKUP.sub(" ", text)).strip() for text in texts]
        items = [
            (segment, words)
            for segment, words in zip(plan.segments, spoken)
            if segment.silence_s or re.search(r"\w", words)
        ]
        if not any(words for _, words in items):
            raise SynthesisError("the text has nothing to speak (only punctuation, symbols or markup)", field="text")
        if any(detect_language(words) == "zh" for _, words in items if words):
            self.mandarin()
        notes = [PREVIEW_NOTE]
        if request.mode == "instruct":
            notes.append(instruction_note())
        elif any(segment.mode == "instruct" for segment, _ in items):
            notes.append("the preview voice cannot speak in a style; the style tags were ignored")
        example = markup_example(request.text)
        if example is not None:
            notes.append(markup_note(example))
        if request.sampling.given():
            notes.append("the preview voice draws no speech tokens; the sampling settings were recorded only")
        started = time.perf_counter()
        speaker = self._speaker_for(request, speaker)
        voices = {style: self._target(sample) for style, sample in style_speakers.items()}
        frontend_s = time.perf_counter() - started
        return self._run(
            items, (self._target(speaker), voices), request.seed, notes, should_stop or (lambda: False), frontend_s
        )

    @staticmethod
    def _target(speaker: SpeakerPrompt) -> world_convert.VoiceStats:
        try:
            return world_convert.VoiceStats.from_vector(speaker.embedding.detach().cpu().numpy())
        except world_convert.ConversionError as error:
            raise SynthesisError(str(error)) from error

    def run_conversion(
        self,
        request: ConversionRequest,
        speaker: SpeakerPrompt | None = None,
        should_stop: Callable[[], bool] | None = None,
        source=None,
    ) -> Iterator[SynthesisResult]:
        """Re-speak the request's recording with the target voice's WORLD statistics (``preview.convert``):
        an approximate match, labelled so; one result per piece, streaming or not."""
        from cosyvoice_mac.preview.convert import convert_source

        speaker = self._speaker_for(request, speaker)
        try:
            target = world_convert.VoiceStats.from_vector(speaker.embedding.detach().cpu().numpy())
        except world_convert.ConversionError as error:
            raise SynthesisError(str(error)) from error
        return convert_source(request, target, self.decoded_source(request, source), should_stop or (lambda: False))

    def _run(self, items, targets, seed, notes, should_stop, frontend_s) -> Iterator[SynthesisResult]:
        voice, styles = targets
        for index, (segment, words) in enumerate(items):
            if should_stop():
                return
            if segment.silence_s:
                yield silence_result(segment, index, len(items), self.sample_rate, seed)
                continue
            target = styles.get(segment.style, voice)
            started = time.perf_counter()
            timings = {"frontend": frontend_s if index == 0 else 0.0}
            key = "en"
            if detect_language(words) == "zh":
                key = "zh-high" if target.f0_hz > HIGH_VOICE_HZ else "zh-low"
            base = self._base_model(key)
            timings["reference"] = time.perf_counter() - started
            clock = time.perf_counter()
            spoken = self._speak(key, words, seed=seed + index, speed=segment.speed)
            timings["tts"] = time.perf_counter() - clock
            if should_stop():
                return
            clock = time.perf_counter()
            frames = world_convert.analyse(spoken.samples, spoken.sample_rate)
            wave = _loudness(base.convert(frames, target, base.estimate_warp(target)))
            timings["convert"] = time.perf_counter() - clock
            yield SynthesisResult(
                audio=wave,
                sample_rate=self.sample_rate,
                speech_token_count=0,
                seconds=time.perf_counter() - started + timings["frontend"],
                text=segment.display_text,
                segment_index=index,
                segment_count=len(items),
                seed=seed,
                mode=segment.mode,
                timings=timings,
                notes=list(notes),
            )


def _loudness(wave: np.ndarray) -> np.ndarray:
    """Scale to TARGET_RMS over the louder half of 20 ms frames, with the peak kept under MAX_PEAK."""
    frames = wave[: len(wave) // 480 * 480].reshape(-1, 480)
    if frames.size == 0:
        return np.clip(wave, -MAX_PEAK, MAX_PEAK).astype(np.float32)
    energy = np.sqrt(np.mean(frames**2, axis=1))
    level = float(np.sqrt(np.mean(np.square(energy[energy >= np.median(energy)])))) or 1.0
    peak = float(np.abs(wave).max()) or 1.0
    return (wave * min(TARGET_RMS / level, MAX_PEAK / peak)).astype(np.float32)
