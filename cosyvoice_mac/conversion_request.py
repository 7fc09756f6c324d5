"""One voice conversion, checked once where it enters (page, CLI, API, Python), trusted everywhere below.

``ConversionRequest.build(source, voice, ...)`` is the door: a ``Recording`` to re-speak and the target
``Voice`` (``request.py``'s). What every job shares (the voice, speed, streaming, post-processing and their
rules) is ``request.SpeechRequest``; this module adds only what a conversion is (a source recording, no
text). Torch-free (numpy only).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import PostSettings, SpeechRequest, Voice

VOICE_CONVERSION = "voice_conversion"  # the mode of a ConversionRequest (no text: a recording is re-spoken)


@dataclass(frozen=True, eq=False)
class Recording:
    """A recording to convert: a file (``audio``) or samples (N,) / (N, channels) with their ``sample_rate``.

    Any length a file may have (``sound.limits.MAX_CONVERT_SECONDS``), mono or stereo (channels are averaged),
    any rate from ``MIN_CONVERT_SAMPLE_RATE``; whether it holds speech is heard where it is decoded
    (``sound.source_check`` at the door, the speech detector in the worker), not here.
    """

    audio: str | None = None
    samples: np.ndarray | None = None
    sample_rate: int | None = None

    def validate(self) -> None:
        if (self.audio is None) == (self.samples is None):
            raise RequestError(
                "source", "source_needed", "a recording to convert is needed: upload or record someone speaking"
            )
        if self.audio is not None and not Path(self.audio).is_file():
            raise RequestError(
                "source", "source_missing", f"the recording to convert, {self.audio}, does not exist; upload it again"
            )
        if self.samples is not None:
            if not isinstance(self.samples, np.ndarray) or self.samples.ndim not in (1, 2) or not self.samples.size:
                raise RequestError(
                    "source",
                    "source_samples",
                    "the recording's samples must be a non-empty numpy array (N,) or (N, channels)",
                )
            if isinstance(self.sample_rate, bool) or not isinstance(self.sample_rate, int) or self.sample_rate <= 0:
                raise RequestError(
                    "source", "source_samples", "the recording's samples need their sample rate (e.g. 16000)"
                )

    @property
    def name(self) -> str:
        """What the sidecar and the messages call it: the file's name, or "the recording"."""
        return Path(self.audio).name if self.audio is not None else "the recording"


@dataclass(frozen=True, eq=False)
class ConversionRequest(SpeechRequest):
    """A valid voice conversion: ``source`` re-spoken in ``voice`` (a saved voice, a prompt recording or the
    backend's own voice), its words and timing kept; no text, no transcript, no instruction.

    The same input gives the same output: the flow starts from its fixed noise and the vocoder's excitation is
    fixed (CosyVoice3) or seeded with ``seed`` 0 (CosyVoice2). ``speed`` stretches the result (1.0 keeps the
    source's timing); ``post`` trims or normalises the finished audio as for any output. ``voice``, ``speed``,
    ``stream`` and ``post`` are ``SpeechRequest``'s (keyword-only).
    """

    source: Recording

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def build(
        cls,
        source: "str | Path | np.ndarray | Recording",
        voice: Voice | None,
        *,
        sample_rate: int | None = None,
        speed: float | None = 1.0,
        stream: bool = False,
        post: PostSettings | None = None,
    ) -> "ConversionRequest":
        """The door: ``source`` a path, samples at ``sample_rate`` or a Recording; a voice's transcript is dropped
        (conversion reads no text). RequestError names the first problem."""
        if isinstance(source, (str, Path)):
            source = Recording(audio=str(source))
        elif isinstance(source, np.ndarray):
            source = Recording(samples=source, sample_rate=sample_rate)
        if not isinstance(source, Recording):
            raise RequestError("source", "source_needed", "a recording to convert is needed: a file path or samples")
        if not isinstance(voice, Voice):
            raise RequestError(
                "voice", "prompt_needed", "a target voice is needed: pick a saved voice or give a prompt recording"
            )
        return cls(
            source=source,
            voice=replace(voice, transcript=None),
            speed=1.0 if speed is None else speed,
            stream=bool(stream),
            post=PostSettings() if post is None else post,
        )

    @property
    def mode(self) -> str:
        return VOICE_CONVERSION

    @property
    def text(self) -> str:
        """Nothing is read: the source's words are kept."""
        return ""

    @property
    def transcript(self) -> None:
        """No prompt transcript is read either (the voice's is dropped at the door)."""
        return None

    @property
    def seed(self) -> int:
        """The only randomness (CosyVoice2's vocoder excitation) is seeded with 0: the same input, the same output."""
        return 0

    def validate(self) -> None:
        """Raise RequestError naming the field ("source", then ``SpeechRequest``'s "voice", "speed", "post")."""
        if not isinstance(self.source, Recording):
            raise RequestError("source", "source_needed", "the recording to convert must be a Recording")
        self.source.validate()
        self.check_voice()
        self.check_delivery()

    def facts(self) -> dict:
        """What the sidecar records about the request (the runtime adds the source's hash and duration)."""
        return {"text": self.text, "mode": self.mode, "source": self.source.name, **self.delivery_facts()}
