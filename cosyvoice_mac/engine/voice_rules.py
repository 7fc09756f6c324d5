"""The one voice rule: what a saved voice's name, style, transcript and recording must be, applied to every
recording of a voice at every door that saves one (the page, the API, the CLI, an imported voices file).
Torch-free: the recording is heard by the prompt check and the speech detector (numpy, onnxruntime).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.preview.labels import PREVIEW
from cosyvoice_mac.style_names import style_name

MAX_VOICE_NAME = 64
DEFAULT_STYLE = "neutral"  # the style of a voice's own recording when none was named
HASH_PATTERN = re.compile(r"[A-Za-z0-9_-]{8,128}")  # a content hash names files: nothing else may pass
BIDI_CONTROLS = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


class VoiceError(EngineError):
    """A named-voice request that cannot be done (unknown name, name taken, bad name); ``field`` names the part
    of the voice at fault (a door's parameter: ``name``, ``transcript`` or ``audio``)."""

    field = "name"


class VoiceExists(VoiceError):
    """The name is taken by another saved voice (the API answers it with a 409, not a 400)."""


class VoiceTranscriptRefused(VoiceError):
    """The transcript breaks the request contract's rule (``request.check_transcript``): a voice saved with it
    could never speak."""

    field = "transcript"


class VoiceStyleRefused(VoiceError):
    """A style name that breaks the one style rule (``style_names.py``, the inline tags' rule too)."""

    field = "style"


class VoiceStyleUnknown(VoiceError):
    """A request asked a saved voice for a style it has no recording of; the message names the ones it has."""

    field = "style"


class VoiceAudioRefused(VoiceError):
    """The recording is no usable voice prompt (``judge_voice_audio``): ``problem`` and ``details`` as the
    check's, the message its sentence. A voice every later job would refuse is never saved."""

    field = "audio"

    def __init__(self, check):
        super().__init__(check.sentence)
        self.problem, self.details = check.problem, check.details


def judge_voice_audio(audio: str | Path | None = None, samples=None, sample_rate: int | None = None):
    """The one check of a recording as a voice (``sound.prompt_check.PromptCheck``; None when there is no
    recording): the prompt check the page, the API and the CLI show, then the speech detector's ear, the same
    that refuses a recording to convert (``frontend.vad.too_little_speech``): a pure tone or music passes the
    first (it has sound and length) but is no one speaking, and is refused as ``not_speech``."""
    from cosyvoice_mac.sound.prompt_check import checked_prompt, judge_samples

    if audio is not None:
        try:
            stat = os.stat(audio)
        except OSError:
            return checked_prompt(audio)  # it explains the missing file
        return _judged_file(str(audio), stat.st_size, stat.st_mtime_ns)
    if samples is None or not sample_rate:
        return None
    return _heard(judge_samples(samples, int(sample_rate), "the recording"), samples, int(sample_rate), "the recording")


@functools.lru_cache(maxsize=64)
def _judged_file(path: str, size: int, modified_ns: int):
    """``judge_voice_audio`` of one file version: the door's check answers the library's save too, so a
    recording is heard once."""
    from cosyvoice_mac.sound.prompt_check import checked_prompt
    from cosyvoice_mac.sound.read import read_audio

    check = checked_prompt(path)
    if not check.ok:
        return check
    return _heard(check, *read_audio(path), Path(path).name)


def _heard(check, samples, sample_rate: int, name: str):
    """``check`` itself when it failed or the speech detector hears someone speaking; else ``not_speech``."""
    from cosyvoice_mac.frontend import vad  # numpy and onnxruntime: only when a recording is judged
    from cosyvoice_mac.sound.prompt_check import PromptCheck

    if not check.ok:
        return check
    try:
        heard = vad.hears_speech(samples, sample_rate)
    except vad.VadUnavailable as error:
        raise VoiceError(f"the recording cannot be checked for speech: {error}") from error
    if not heard:
        return PromptCheck(check.seconds, check.speech_seconds, "not_speech", {"name": name})
    return check


def check_voice_audio(audio: str | Path | None = None, samples=None, sample_rate: int | None = None) -> None:
    """VoiceAudioRefused unless the recording ``audio`` (a file) or ``samples`` at ``sample_rate`` passes
    ``judge_voice_audio``: every door that saves a voice ends here."""
    check = judge_voice_audio(audio, samples, sample_rate)
    if check is not None and not check.ok:
        raise VoiceAudioRefused(check)


def check_transcript(transcript: str | None) -> str | None:
    """``transcript`` stripped (None when blank); VoiceTranscriptRefused when the request contract would refuse
    it in every job (too long, control characters)."""
    from cosyvoice_mac.request import check_transcript as contract_rule

    if transcript is None:
        return None
    if not isinstance(transcript, str):
        raise VoiceTranscriptRefused(f"the transcript must be text, not {type(transcript).__name__}")
    transcript = transcript.strip() or None
    if transcript is not None:
        try:
            contract_rule(transcript)
        except RequestError as error:
            raise VoiceTranscriptRefused(str(error)) from None
    return transcript


def check_voice_name(name: str) -> str:
    """``name`` stripped; VoiceError unless it is 1-MAX_VOICE_NAME printable characters."""
    if not isinstance(name, str) or not name.strip():
        raise VoiceError("a voice needs a name")
    name = name.strip()
    if len(name) > MAX_VOICE_NAME or any(ord(char) < 32 or 0x7F <= ord(char) < 0xA0 for char in name):
        raise VoiceError(f"voice names are 1-{MAX_VOICE_NAME} printable characters; {name[:80]!r} is not")
    if any(char in BIDI_CONTROLS for char in name):  # they reorder what is shown around the name
        raise VoiceError(
            f"voice names cannot hold text-direction control characters (U+202A-U+202E, "
            f"U+2066-U+2069); {name[:80]!r} does"
        )
    if name.casefold() == PREVIEW:  # the built-in voice answers to it: a saved one would be shadowed
        raise VoiceError(f"{name!r} is the built-in preview voice's name; pick another name")
    return name


def check_style(style: str | None) -> str:
    """``style`` as a style's name (stripped, lowercased; DEFAULT_STYLE when None or blank); VoiceStyleRefused
    unless it passes the one style rule (``style_names.style_name``: neutral, happy, whisper, car-noisy...), the
    rule an inline ``(style)`` tag follows, so every recording can be asked for inline."""
    if style is None or (isinstance(style, str) and not style.strip()):
        return DEFAULT_STYLE
    try:
        return style_name(style)
    except ValueError as error:
        raise VoiceStyleRefused(str(error)) from None


def check_audio_hash(audio_hash: str) -> str:
    """``audio_hash`` itself when it is a content hash (it names files: nothing else may pass)."""
    if not isinstance(audio_hash, str) or not HASH_PATTERN.fullmatch(audio_hash):
        raise ValueError(f"audio hash {audio_hash!r} is not a content hash")
    return audio_hash


def is_bare_file_name(name: str) -> bool:
    """A file name in the voices folder, never a path (it names a file the library writes or deletes)."""
    return bool(name) and Path(name).name == name and name not in (".", "..") and "\\" not in name
