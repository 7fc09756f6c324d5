"""The APIs' saved-voice door: list, find, create, rename, replace and delete voices in the engine's
voice library, in the shape of OpenAI's voice objects; add and remove a voice's style recordings; export
voices as a voices file and import one (``engine.voice_transfer``).

:class:`VoiceDoor` is a part of :class:`~cosyvoice_mac.api.engine_link.EngineLink` (it owns no state of its
own): it reaches the engine through the link's ``_engine()``, ``check_ready()``, ``uses_preview`` and ``host``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from pathlib import Path

from cosyvoice_mac.api.errors import ApiError, bad_request, job_failure
from cosyvoice_mac.engine import EngineError, TaskFailed, VoiceError, VoiceExists, VoiceStyleUnknown
from cosyvoice_mac.engine.messages import Failed, Fault
from cosyvoice_mac.engine.voice_library import (
    VoiceAudioRefused,
    VoiceLibrary,
    VoiceTranscriptRefused,
    check_transcript,
    judge_voice_audio,
)
from cosyvoice_mac.engine.voice_rules import DEFAULT_STYLE, VoiceStyleRefused, check_style
from cosyvoice_mac.engine.voice_transfer import SUFFIX, VoiceFileRefused, export_voices, import_voices
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.preview.labels import PREVIEW_LABEL
from cosyvoice_mac.request import Voice
from cosyvoice_mac.sound.clearest import cut_prompt, wants_cut, with_trim_hint

VOICE_TASK_TIMEOUT_S = 900.0


def voice_id(name: str) -> str:
    """A stable id for a saved voice's name (names may hold spaces and any script; ids do not)."""
    return "voice_" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]


class VoiceDoor:
    """The voice routes' half of the engine link (see the module's docstring)."""

    def voices(self) -> list[dict]:
        try:
            entries = self.host.engine.voices.list() if self.host.engine else []
        except VoiceError as error:
            raise ApiError(500, str(error), code="voice_library_unreadable") from error
        listed = [_describe_voice(entry) for entry in entries]
        if self.uses_preview:
            listed.insert(
                0,
                {
                    "id": PREVIEW,
                    "object": "audio.voice",
                    "name": PREVIEW,
                    "created_at": 0,
                    "type": "builtin",
                    "preview": True,
                    "label": PREVIEW_LABEL,
                    "transcript": None,
                },
            )
        return listed

    def find_voice(self, reference: str) -> str | None:
        """The library name for a voice id or name (None: the preview voice); 404 when there is none."""
        if reference == PREVIEW and self.uses_preview:
            return None
        for entry in self.voices():
            if entry["id"] != PREVIEW and reference in (entry["id"], entry["name"]):
                return entry["name"]
        known = ", ".join(entry["name"] for entry in self.voices()) or "none saved yet"
        raise ApiError(
            404,
            f"there is no voice {reference!r} (known: {known}); create one with POST /v1/voices",
            code="voice_not_found",
            param="voice",
        )

    def voice(
        self, name: str | None, transcript: str | None = None, recording: str | None = None, style: str | None = None
    ) -> Voice:
        """The request's Voice: ``recording`` (a prompt file this server wrote from an upload, never a path a
        client named), else the saved voice ``name`` (from :meth:`find_voice`; None: the preview voice) speaking
        its recording of ``style`` (None: its own; one it lacks is a 404 naming the styles it has).
        ``transcript`` is what the recording says (for a saved voice: the client's own, over the saved one)."""
        if style is not None and (recording is not None or name is None):
            raise bad_request(
                "a style picks one of a saved voice's recordings: name a saved voice, or leave 'style' out",
                "style_needs_saved_voice",
                "style",
            )
        if recording is not None:
            return Voice.recording(recording, transcript=transcript)
        if name is None:
            return Voice.builtin()
        try:
            voice = self._engine().voice(name, style)
        except VoiceStyleUnknown as error:
            raise ApiError(404, str(error), code="style_not_found", param="style") from error
        except VoiceError as error:
            raise ApiError(404, str(error), code="voice_not_found", param="voice") from error
        return replace(voice, transcript=transcript) if transcript else voice

    def create_voice(self, name: str, audio_path: str, transcript: str | None) -> dict:
        """Save a recording as a named voice (the worker prepares its features). Blocking."""
        engine = self._engine()
        self.check_ready()
        _checked_words(VoiceLibrary.check_name, name)
        _checked_words(check_transcript, transcript)
        self.check_recording(audio_path, "audio")
        try:
            entry = engine.save_voice_from_audio(name, audio_path, transcript, timeout=VOICE_TASK_TIMEOUT_S)
        except VoiceExists as error:
            raise ApiError(409, str(error), code="voice_exists", param="name") from error
        except VoiceError as error:
            raise _refusal(error) from error
        except TaskFailed as error:
            if error.fault != Fault.INPUT:  # the model process died meanwhile, ...: not the recording's fault
                raise job_failure(Failed("", str(error), fault=error.fault), None) from error
            raise bad_request(f"the recording cannot be used: {error}", "invalid_audio", "audio") from error
        except EngineError as error:
            raise bad_request(str(error), "invalid_voice", "name") from error
        return _describe_voice(entry)

    def rename_voice(self, reference: str, new_name: str | None, transcript: object = ...) -> dict:
        """Rename the saved voice ``reference`` (id or name) and/or change its transcript (``...``: leave it)."""
        name = self._saved_name(reference)
        library = self._engine().voices
        if transcript is not ...:  # both changes are checked before either is made
            _checked_words(check_transcript, transcript)
        try:
            entry = library.get(name)
            if new_name is not None and new_name != name:
                entry = library.rename(name, new_name)
            if transcript is not ...:
                entry = library.set_transcript(entry["name"], transcript)
        except VoiceExists as error:
            raise ApiError(409, str(error), code="voice_exists", param="name") from error
        except VoiceError as error:
            raise _refusal(error) from error
        return _describe_voice(entry)

    def replace_voice(self, reference: str, audio_path: str, transcript: str | None) -> dict:
        """Give the saved voice ``reference`` a new recording (the worker prepares its features). Blocking."""
        name = self._saved_name(reference)
        engine = self._engine()
        self.check_ready()
        _checked_words(check_transcript, transcript)
        self.check_recording(audio_path, "audio")  # a recording refused leaves the voice's own in place
        try:
            entry = engine.replace_voice(name, audio_path, transcript, timeout=VOICE_TASK_TIMEOUT_S)
        except TaskFailed as error:
            raise bad_request(f"the recording cannot be used: {error}", "invalid_audio", "audio") from error
        except (VoiceTranscriptRefused, VoiceAudioRefused) as error:
            raise _refusal(error) from error
        except VoiceError as error:
            raise ApiError(404, str(error), code="voice_not_found") from error
        except EngineError as error:
            raise bad_request(str(error), "invalid_voice", "audio") from error
        return _describe_voice(entry)

    def add_style(self, reference: str, style: str, audio_path: str, transcript: str | None) -> dict:
        """Give the saved voice ``reference`` a recording of ``style`` (the worker prepares its features)."""
        name = self._saved_name(reference)
        engine = self._engine()
        self.check_ready()
        _checked_words(check_style, style)
        _checked_words(check_transcript, transcript)
        self.check_recording(audio_path, "audio")
        try:
            entry = engine.add_voice_style(name, style, audio_path, transcript, timeout=VOICE_TASK_TIMEOUT_S)
        except VoiceExists as error:
            raise ApiError(409, str(error), code="style_exists", param="style") from error
        except TaskFailed as error:
            raise bad_request(f"the recording cannot be used: {error}", "invalid_audio", "audio") from error
        except VoiceError as error:
            raise _refusal(error) from error
        except EngineError as error:
            raise bad_request(str(error), "invalid_voice", "audio") from error
        return _describe_voice(entry)

    def remove_style(self, reference: str, style: str) -> dict:
        name = self._saved_name(reference)
        try:
            return _describe_voice(self._engine().voices.remove_style(name, style))
        except VoiceError as error:
            raise ApiError(404, str(error), code="style_not_found", param="style") from error

    def export_voices(self, reference: str | None) -> tuple[bytes, str]:
        """The voices file of the saved voice ``reference`` (None: every saved voice), and its file name."""
        library = self._engine().voices
        names = None if reference is None else [self._saved_name(reference)]
        try:
            data = export_voices(library, names)
        except VoiceError as error:
            raise bad_request(str(error), "voice_not_exportable", "voice_id") from error
        stem = "voices" if names is None else re.sub(r"[^A-Za-z0-9._-]+", "_", names[0]).strip("._") or "voice"
        return data, stem + SUFFIX

    def import_voices(self, path: str) -> list[dict]:
        """Add the voices of an uploaded voices file, all or none: a 400 (413 over the limits) saying why not."""
        library = self._engine().voices
        try:
            saved = import_voices(library, Path(path))
        except VoiceFileRefused as error:
            status = 413 if error.code == "too_large" else 400
            raise ApiError(status, str(error), code=f"voice_file_{error.code}", param="file") from error
        except VoiceError as error:  # the voice list itself cannot be read or written
            raise ApiError(500, str(error), code="voice_library_unreadable") from error
        return [
            {**_describe_voice(entry), "name_in_file": entry["name_in_file"], "features_for": entry["features"]}
            for entry in saved
        ]

    def _saved_name(self, reference: str) -> str:
        name = self.find_voice(reference)
        if name is None:
            raise bad_request("the preview voice is built in and cannot be changed", "builtin_voice", "voice_id")
        return name

    def check_recording(self, audio_path: str, param: str, trim: str | tuple[float, float] | None = None) -> str:
        """The recording to use: ``audio_path``, or the part ``trim`` keeps (``parse_trim``'s reading of
        prompt_trim: auto, the clearest 12 s of one over the limit; a span, that part), a file beside it. 400 naming
        ``param`` when the file is no usable voice (not audio, silent, too short or long, no one speaking): the
        voice library's one rule (``judge_voice_audio``), for a voice saved or spoken from; a too-long one's names
        ``prompt_trim`` where the request can send it (``trim`` not None)."""
        try:
            check = judge_voice_audio(audio_path)
            if trim is not None and wants_cut(trim, check.problem == "too_long"):
                kept, _ = cut_prompt(audio_path, trim, Path(audio_path).parent / "clearest")
                audio_path, check = str(kept), judge_voice_audio(kept)
        except VoiceError as error:  # the speech detector is not installed
            raise ApiError(500, str(error), code="speech_detector_missing") from error
        except ValueError as error:  # the chosen span starts after the recording ends
            raise bad_request(f"prompt_trim: {error}", "invalid_prompt_trim", "prompt_trim") from error
        if check.problem == "too_long" and trim is not None:
            raise bad_request(with_trim_hint(check.sentence, "v1"), "audio_too_long", param)
        if not check.ok:
            raise bad_request(check.sentence, f"audio_{check.problem}", param)
        return audio_path

    def delete_voice(self, reference: str) -> dict:
        name = self._saved_name(reference)
        try:
            self._engine().voices.delete(name)
        except VoiceError as error:
            raise ApiError(404, str(error), code="voice_not_found") from error
        return {"id": voice_id(name), "object": "audio.voice.deleted", "deleted": True, "name": name}


def _refusal(error: VoiceError) -> ApiError:
    """A voice refused by the library's rule, as a 400 naming the part at fault (name, transcript or audio)."""
    if isinstance(error, VoiceAudioRefused):
        return bad_request(str(error), f"audio_{error.problem}", error.field)
    code = "invalid_transcript" if isinstance(error, VoiceTranscriptRefused) else "invalid_voice_name"
    code = "invalid_style" if isinstance(error, VoiceStyleRefused) else code
    return bad_request(str(error), code, error.field)


def _checked_words(rule, value) -> None:
    """``rule(value)`` (a voice's name or transcript rule), its refusal a 400 before any recording is heard."""
    if value is None:
        return
    try:
        rule(value)
    except VoiceError as error:
        raise _refusal(error) from error


def _describe_voice(entry: dict) -> dict:
    """A library entry in the shape of OpenAI's voice object, plus our own facts."""
    return {
        "id": voice_id(entry["name"]),
        "object": "audio.voice",
        "name": entry["name"],
        "created_at": int(entry.get("created") or 0),
        "type": "audio_sample",
        "preview": False,
        "transcript": entry.get("transcript"),
        "model": entry.get("model_id"),
        "styles": [entry.get("style") or DEFAULT_STYLE, *sorted(entry.get("styles") or {})],
    }
