"""One synthesis request, checked once where it enters (page, CLI, API, Python),
trusted everywhere below.

``Request.build(text, voice, ...)`` is the door: it strips the strings, derives the mode once from the
transcript and the instruction, picks the seed once (and records it), and checks every rule here, so the
page, the engine, the worker, the pipeline and the preview voice all read the same numbers. A ``Request``
built by hand is checked the same way (``__post_init__`` calls ``validate()``).

What every job shares, synthesis or voice conversion (``conversion_request.py``), is ``SpeechRequest``: the
voice, the speed, streaming and post-processing, with their rules, written once here. Torch-free (numpy
only): the page and the CLI build requests without loading a model.
"""

from __future__ import annotations

import math
import secrets
import unicodedata
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.settings import bounds, choices
from cosyvoice_mac.settings.fields import SAMPLING_FIELDS as SAMPLING_FIELDS  # the contract's names, read here
from cosyvoice_mac.sound.post_settings import LUFS_RANGE as LUFS_RANGE  # the contract's limits, read here
from cosyvoice_mac.sound.post_settings import PostSettings
from cosyvoice_mac.style_names import style_name
from cosyvoice_mac.token_sampling import Sampling
from cosyvoice_mac.voice_file import VoiceFileLimits, read_voice_file

MODES = choices("mode")
MAX_TEXT_CHARS = 5000  # one request; longer texts are split into several requests
MAX_TRANSCRIPT_CHARS = 1000  # a 30 s prompt holds a few hundred characters
MAX_INSTRUCT_CHARS = 500
SPEED_RANGE = bounds("speed")  # the settings table says why
MAX_SEED = bounds("seed")[1]
MAX_UPLOAD_BYTES = 20 << 20  # one uploaded file (a prompt recording), on the page and through /v1 alike
MAX_BATCH_UPLOAD_BYTES = 25 * MAX_UPLOAD_BYTES  # one request of several recordings to convert (a batch), in all
ALLOWED_CONTROLS = "\t\n\r"
MAX_INLINE_PAUSE_S = 10.0  # one [pause] tag (frontend/inline.py); a longer silence is an edit, not a pause


VOICE_FILE_LIMITS = VoiceFileLimits(  # a voices file (an exported voice or library): voice_file.py
    file_bytes=256 << 20,  # packed, and unpacked in all (a zip bomb is refused by its declared sizes)
    members=2048,
    manifest_bytes=1 << 20,
    recording_bytes=MAX_UPLOAD_BYTES,  # one recording, as one upload may be
    features_bytes=16 << 20,  # one model's cached features of a 30 s prompt are well under 1 MB
    recordings_per_voice=16,  # the styles of one voice
)


@dataclass(frozen=True, eq=False)
class Voice:
    """Whose voice speaks: a prompt recording (a file, or mono samples with their rate) with its transcript,
    a saved voice's name, or features already prepared in this process (``prepared`` = their audio hash).

    ``transcript`` is what the recording says; given, the request speaks zero-shot.
    """

    audio: str | None = None
    samples: np.ndarray | None = None  # (N,) or (N, channels) float
    sample_rate: int | None = None
    saved: str | None = None
    prepared: str | None = None
    stock: bool = False  # the backend's own voice (the preview voice has one; CosyVoice has none)
    transcript: str | None = None
    style: str | None = None  # a saved voice's recording of this style (None: its own); the engine's library checks it

    @classmethod
    def recording(cls, audio: str | Path, transcript: str | None = None) -> "Voice":
        return cls(audio=str(audio), transcript=transcript)

    @classmethod
    def from_samples(cls, samples: np.ndarray, sample_rate: int, transcript: str | None = None) -> "Voice":
        return cls(samples=samples, sample_rate=sample_rate, transcript=transcript)

    @classmethod
    def saved_voice(cls, name: str, transcript: str | None = None, style: str | None = None) -> "Voice":
        """The saved voice ``name``, speaking its recording of ``style`` (None or blank: its own)."""
        return cls(saved=name, transcript=transcript, style=(style or "").strip() or None)

    @classmethod
    def builtin(cls) -> "Voice":
        """The backend's own voice, for clients that name no recording (the preview voice's speaker)."""
        return cls(stock=True)

    @classmethod
    def load(cls, file: str | Path, name: str | None = None, style: str | None = None) -> "Voice":
        """The recording of ``style`` (None: its own) of the voice ``name`` (None: the only one) in a voices file
        (``voice_file.py``), with its transcript, in memory; VoiceFileRefused (an InputError) says why not."""
        recording = read_voice_file(file, VOICE_FILE_LIMITS).recording(name, style)
        return cls.from_samples(recording.samples, recording.sample_rate, transcript=recording.transcript)

    def _sources(self) -> list[str]:
        given = [name for name in ("audio", "samples", "saved", "prepared") if getattr(self, name) is not None]
        return given + ["stock"] * bool(self.stock)

    @property
    def kind(self) -> str:
        """ "audio", "samples", "saved", "prepared" or "stock"."""
        given = self._sources()
        return given[0] if len(given) == 1 else ""

    def validate(self) -> None:
        given = self._sources()
        if len(given) != 1:
            raise RequestError(
                "voice",
                "voice_ambiguous" if given else "prompt_needed",
                "give either prompt audio or a saved voice, not both"
                if given
                else "a prompt voice is needed: upload or record 3-30 s of speech, or pick a saved voice",
            )
        if self.audio is not None and not Path(self.audio).is_file():
            raise RequestError(
                "voice", "prompt_missing", f"the prompt audio file {self.audio} does not exist; upload it again"
            )
        if self.samples is not None:
            if not isinstance(self.samples, np.ndarray) or self.samples.ndim not in (1, 2):
                raise RequestError(
                    "voice",
                    "prompt_samples",
                    f"prompt samples must be a numpy array (N,) or (N, channels), not {type(self.samples).__name__}",
                )
            if not isinstance(self.sample_rate, int) or self.sample_rate <= 0:
                raise RequestError("voice", "prompt_samples", "prompt samples need their sample rate (e.g. 16000)")
        if self.saved is not None and (not isinstance(self.saved, str) or not self.saved.strip()):
            raise RequestError("voice", "voice_error", "a saved voice is named by a non-empty string")
        if self.transcript is not None:
            check_transcript(self.transcript)
        if self.style is not None:
            self._check_style()

    def _check_style(self) -> None:
        """A style names one of a saved voice's recordings (which ones it has, the library says where the
        request enters): so only a saved voice has one, and its name follows the one style rule (``style_names``)."""
        if self.saved is None:
            raise RequestError(
                "style",
                "style_needs_saved_voice",
                "a style picks one of a saved voice's recordings: pick a saved voice, or leave the style out",
            )
        try:
            style_name(self.style)
        except ValueError as error:
            raise RequestError("style", "style_invalid", str(error)) from None

    def describe(self) -> str | None:
        """What the sidecar records: the saved voice's name, or None for a recording."""
        return self.saved


@dataclass(frozen=True, eq=False, kw_only=True)
class SpeechRequest:
    """What every job asks for, whether it reads a text (``Request``) or re-speaks a recording
    (``conversion_request.ConversionRequest``): the ``voice`` that speaks, the ``speed``, whether it is
    streamed, and what is done to the finished audio (``post``). Their rules are written here once; each kind
    adds its own fields and rules, and answers ``mode``, ``text``, ``transcript`` and ``seed``, which a job, its
    result and its sidecar read of either kind. Keyword-only, so each kind keeps its own fields first.
    """

    voice: Voice
    speed: float = 1.0
    stream: bool = False
    post: PostSettings = PostSettings()

    def check_voice(self) -> None:
        """Raise RequestError ("voice") unless the voice is one valid Voice."""
        if not isinstance(self.voice, Voice):
            raise RequestError("voice", "voice_error", f"the voice must be a Voice, not {type(self.voice).__name__}")
        self.voice.validate()

    def check_delivery(self) -> None:
        """Raise RequestError ("speed" or "post") unless the speed and the post-processing are valid."""
        check_speed(self.speed, self.stream)
        if not isinstance(self.post, PostSettings):
            raise RequestError(
                "post", "post_invalid", f"post-processing must be PostSettings, not {type(self.post).__name__}"
            )
        self.post.validate()

    def delivery_facts(self) -> dict:
        """What every sidecar records of the shared fields (plain JSON values)."""
        style = {"style": self.voice.style} if self.voice.style else {}  # the saved voice's recording spoken
        return {"voice": self.voice.describe(), **style, "speed": self.speed, "stream": self.stream}


@dataclass(frozen=True, eq=False)
class Request(SpeechRequest):
    """A valid request: every field already stripped, decided and checked (see the module docstring).

    ``mode`` is "zero_shot" (the voice's transcript is read with the text), "cross_lingual" (the text
    only) or "instruct" (``instruct`` steers the style); ``seed`` is the one the audio was sampled with.
    ``typed_text`` is what the user typed where ``text`` is the glossary's rewrite of it (``spoken_as``).
    ``voice``, ``speed``, ``stream`` and ``post`` are ``SpeechRequest``'s (keyword-only).
    """

    text: str
    mode: str
    instruct: str | None = None
    seed: int = 0
    typed_text: str | None = None
    sampling: Sampling = Sampling()
    check: bool | None = None  # sentences checked and retaken (``engine.takes``); None: as the check setting says

    def __post_init__(self) -> None:
        self.validate()

    def spoken_as(self, text: str) -> "Request":
        """This request speaking ``text``, the glossary's rewrite of what the user typed. Every rule holds for
        ``text`` but the length limit: that one is about what the user typed, checked when they typed it, so a
        rewrite that lengthens the text (markup spells a word phone by phone) never fails the request later."""
        return replace(self, text=text, typed_text=self.text if self.typed_text is None else self.typed_text)

    @classmethod
    def build(
        cls,
        text: str,
        voice: Voice | None,
        *,
        mode: str | None = None,
        instruct: str | None = None,
        seed: int | float | None = None,
        speed: float | None = 1.0,
        stream: bool = False,
        post: PostSettings | None = None,
        sampling: Sampling | None = None,
        check: bool | None = None,
    ) -> "Request":
        """Normalise what a user typed into a valid Request; RequestError names the first problem.

        ``mode`` None derives it: an instruction -> instruct, else a transcript -> zero-shot, else
        cross-lingual. A mode asked for must be possible (zero-shot needs a transcript); what the mode does
        not use (the transcript outside zero-shot, the instruction outside instruct) is dropped.
        ``seed`` None picks one now. ``speed`` None means 1.0. ``post`` None means no post-processing.
        ``sampling`` None means the model's own. ``check`` None follows the global switch (the ``check`` setting);
        True or False decides for this request.
        """
        if voice is None:
            raise RequestError(
                "voice",
                "prompt_needed",
                "a prompt voice is needed: upload or record 3-30 s of speech, or pick a saved voice",
            )
        if not isinstance(voice, Voice):
            raise RequestError("voice", "voice_error", f"the voice must be a Voice, not {type(voice).__name__}")
        transcript = _stripped(voice.transcript)
        instruct = _stripped(instruct)
        if mode is None:
            mode = "instruct" if instruct else "zero_shot" if transcript else "cross_lingual"
        check_mode_texts(mode, transcript, instruct)  # a mode asked for that cannot be is said before other rules
        voice = replace(voice, transcript=transcript if mode == "zero_shot" else None)
        return cls(
            text=text,
            voice=voice,
            mode=mode,
            instruct=instruct if mode == "instruct" else None,
            seed=_seed(seed),
            speed=1.0 if speed is None else speed,
            stream=bool(stream),
            post=PostSettings() if post is None else post,
            sampling=Sampling() if sampling is None else sampling,
            check=check,
        )

    def validate(self) -> None:
        """Raise RequestError naming the field and the rule; the only place these rules are written."""
        if self.typed_text is not None:
            _check_string("text", "the text", self.typed_text, MAX_TEXT_CHARS)
        _check_string("text", "the text", self.text, MAX_TEXT_CHARS if self.typed_text is None else None)
        if not self.text.strip():
            raise RequestError("text", "text_empty", "the text to speak is empty; type a sentence")
        if not any(unicodedata.category(char)[0] in "LN" for char in self.text):
            raise RequestError(
                "text",
                "text_unspeakable",
                "the text has nothing to speak (only punctuation, symbols or emoji); type some words",
            )
        self.check_voice()
        if self.mode not in MODES:
            raise RequestError("mode", "mode_unknown", f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        check_mode_texts(self.mode, self.voice.transcript, self.instruct)
        if self.instruct is not None:
            _check_string("instruct", "the instruction", self.instruct, MAX_INSTRUCT_CHARS)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise RequestError(
                "seed",
                "seed_invalid",
                f"seed {self.seed!r} must be a whole number from 0 to {MAX_SEED}",
                limit=MAX_SEED,
            )
        if self.check is not None and not isinstance(self.check, bool):
            raise RequestError("check", "check_invalid", f"check must be true or false, not {self.check!r}")
        self.check_delivery()
        if not isinstance(self.sampling, Sampling):
            raise RequestError(
                "sampling", "sampling_invalid", f"sampling must be Sampling, not {type(self.sampling).__name__}"
            )
        self.sampling.validate()

    @property
    def transcript(self) -> str | None:
        """The prompt's transcript the LLM reads (zero-shot only)."""
        return self.voice.transcript if self.mode == "zero_shot" else None

    def facts(self) -> dict:
        """What the sidecar records about the request (plain JSON values)."""
        return {
            "text": self.text,
            "mode": self.mode,
            "instruct": self.instruct,
            "prompt_text": self.transcript,
            "seed": self.seed,
            "check": self.check,
            **self.delivery_facts(),
        }


def check_mode_texts(mode: str, transcript, instruct) -> None:
    """What a mode needs besides the text, the one place it is written (``Request.build`` asks it of the mode
    asked for, ``validate`` of every Request): zero-shot reads the prompt's transcript, instruct an instruction.
    Blank strings count as missing."""
    if mode == "zero_shot" and not _stripped(transcript):
        raise RequestError(
            "transcript",
            "transcript_needed",
            "zero-shot mode needs the prompt's transcript; type what the recording says, or pick cross-lingual mode",
        )
    if mode == "instruct" and not _stripped(instruct):
        raise RequestError("mode", "instruct_needed", "instruct mode needs an instruction, e.g. 'speak sadly'")


def check_speed(speed, stream: bool) -> None:
    """The speed rule for both contracts (this and ``conversion_request``): in range, and 1.0 while streaming."""
    low, high = SPEED_RANGE
    if (
        isinstance(speed, bool)
        or not isinstance(speed, (int, float))
        or not math.isfinite(speed)
        or not low <= speed <= high
    ):
        raise RequestError(
            "speed",
            "speed_invalid",
            f"speed {speed!r} is out of range; use a value from {low:g} to {high:g}",
            low=low,
            high=high,
        )
    if stream and speed != 1.0:
        raise RequestError(
            "speed",
            "speed_stream",
            f"speed {speed:g} cannot be used while streaming; turn streaming off or use speed 1.0",
        )


def _stripped(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return value  # validate() names the wrong type
    return value.strip() or None


def _seed(seed) -> int:
    """The seed to record: a fresh one for None; a whole float (the page's number box) as int."""
    if seed is None:
        return secrets.randbelow(MAX_SEED + 1)
    if isinstance(seed, float) and math.isfinite(seed) and seed.is_integer():
        return int(seed)
    if isinstance(seed, str):
        try:
            return int(seed.strip())
        except ValueError:
            pass
    return seed  # validate() refuses what is not a whole number in range


def check_transcript(transcript) -> None:
    """The transcript's rule, a request's and a saved voice's alike (RequestError naming ``transcript``): text of
    at most MAX_TRANSCRIPT_CHARS characters with no control characters. A voice saved with a longer one could
    never speak."""
    _check_string("transcript", "the transcript", transcript, MAX_TRANSCRIPT_CHARS)


def _check_string(field: str, what: str, value, limit: int | None) -> None:
    """``limit`` None: any length (the glossary's rewrite of a text checked when it was typed)."""
    if not isinstance(value, str):
        raise RequestError(field, f"{field}_invalid", f"{what} must be text, not {type(value).__name__}")
    if limit is not None and len(value) > limit:
        raise RequestError(
            field,
            f"{field}_too_long",
            f"{what} has {len(value):,} characters; the limit is "
            f"{limit:,}. Shorten it or split it into several requests.",
            count=len(value),
            limit=limit,
        )
    for position, char in enumerate(value):
        if unicodedata.category(char) == "Cc" and char not in ALLOWED_CONTROLS:
            raise RequestError(
                field,
                "control_character",
                f"{what} holds the control character U+{ord(char):04X} "
                f"at position {position + 1}; remove it (paste the text as plain text)",
                position=position + 1,
                code_point=f"U+{ord(char):04X}",
            )
