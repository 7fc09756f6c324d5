"""A saved voice's recordings: its own (the one a request without a style speaks with, of the style
``style``) and more, one per style (happy, whisper, outdoor, ...: one lowercase word, ``style_names``), each
with its transcript and a copy of its audio. Every recording passes the one voice rule (``voice_rules.py``)
before it is kept.

Mixed into :class:`cosyvoice_mac.engine.voice_library.VoiceLibrary`, which provides the index (``_read``,
``_store``), the lock, the folder and the recording files (``_store_audio``, ``_forget_audio``). Torch-free.
"""

from __future__ import annotations

import time
from pathlib import Path

from cosyvoice_mac.engine.voice_rules import (
    DEFAULT_STYLE,
    HASH_PATTERN,
    MAX_VOICE_NAME,
    VoiceError,
    VoiceExists,
    VoiceStyleUnknown,
    check_audio_hash,
    check_style,
    check_transcript,
    check_voice_audio,
    is_bare_file_name,
)
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.request import VOICE_FILE_LIMITS, Voice
from cosyvoice_mac.stored import Field, typed_records

# One recording as the index holds it (a voice's own fields, and each of its ``styles``).
RECORDING_SHAPE = {
    "audio_hash": Field(("text",), required=True, rule=HASH_PATTERN.fullmatch, rule_says="a content hash"),
    "model_id": Field(("text", "null")),
    "transcript": Field(("text", "null")),
    "created": Field(("number", "null"), rule=lambda seconds: 0 <= seconds < 1e11, rule_says="a time"),
    "audio_file": Field(("text", "null"), rule=is_bare_file_name, rule_says="a file name in the voices folder"),
}
RECORDING_KEYS = tuple(RECORDING_SHAPE)


class VoiceStyles:
    """The voice library's methods for a voice's several recordings (state lives on the library)."""

    def recordings(self, name: str) -> list[dict]:
        """The voice's recordings, its own first, then by style: each ``{"style", "audio_hash", "model_id",
        "transcript", "created", "audio_file", "audio_path"}`` (``audio_path`` None without a copy)."""
        return self._recordings_of(self.get(name))

    def style_names(self, name: str) -> tuple[str, ...]:
        """The styles the voice has recordings of, its own first: what its inline ``(style)`` tags may name beside
        the model's own. VoiceError when there is no such voice."""
        return tuple(recording["style"] for recording in self.recordings(name))

    def styled(self, name: str, style: str | None) -> dict:
        """The voice's entry as a request of ``style`` speaks it (None: its own recording): its own fields with
        that recording's hash, model, transcript, audio and ``style`` (as the voice spells it), and all its
        ``recordings`` (for its inline style tags). VoiceError when there is no such voice; VoiceStyleUnknown,
        naming the styles it has, when it has no such recording."""
        entry = self.get(name)
        recordings = self._recordings_of(entry)
        if style is None:
            return {**entry, **recordings[0], "recordings": recordings}
        for recording in recordings:
            if recording["style"].casefold() == str(style).strip().casefold():
                return {**entry, **recording, "recordings": recordings}
        styles = ", ".join(recording["style"] for recording in recordings)
        raise VoiceStyleUnknown(f"the voice {name!r} has no {style!r} recording; its styles: {styles}")

    def recording_voice(self, name: str, style: str | None = None) -> Voice:
        """The voice's recording of ``style`` (None: its own) as a request's Voice for a model loaded in this
        process (``load_model``), with that recording's transcript; raises as :meth:`styled`, or VoiceError
        when the library kept no copy of that recording."""
        entry = self.styled(name, style)
        if not entry.get("audio_path"):
            raise VoiceError(f"the voice {name!r} has no copy of its {entry['style']!r} recording in {self.folder}")
        return Voice.recording(entry["audio_path"], transcript=entry.get("transcript"))

    def add_style(
        self,
        name: str,
        style: str,
        *,
        audio_hash: str,
        model_id: str | None,
        transcript: str | None = None,
        audio: str | Path | None = None,
        overwrite: bool = False,
    ) -> dict:
        """Give the voice ``name`` a recording of ``style`` (a file ``audio`` of the content hash
        ``audio_hash``), once it passes the one voice rule. VoiceExists when the voice has that style and
        not ``overwrite`` (its own recording's style is changed by replacing the voice). The voice's entry."""
        style = check_style(style)
        transcript = check_transcript(transcript)
        check_audio_hash(audio_hash)
        if audio is None:
            raise VoiceError(f"the {style!r} recording of the voice {name!r} needs its audio file")
        check_voice_audio(audio)
        with self._lock:
            index = self._read()
            entry = index.voices.get(name)
            if entry is None:
                raise VoiceError(f"there is no saved voice named {name!r}")
            styles = dict(entry.get("styles") or {})
            taken = {existing.casefold() for existing in [entry.get("style") or DEFAULT_STYLE, *styles]}
            if style.casefold() in taken and not (overwrite and style in styles):
                raise VoiceExists(
                    f"the voice {name!r} already has a {style!r} recording; pick another style or replace it"
                )
            if style not in styles and len(styles) + 1 >= VOICE_FILE_LIMITS.recordings_per_voice:
                raise VoiceError(
                    f"the voice {name!r} holds {len(styles) + 1} recordings, the most a voice may hold; "
                    "remove a style first"
                )
            self.folder.mkdir(parents=True, exist_ok=True)
            replaced = styles.get(style)
            styles[style] = {
                "audio_hash": audio_hash,
                "model_id": model_id,
                "transcript": transcript,
                "created": time.time(),
                "audio_file": self._store_audio(audio_hash, audio, None, None),
            }
            entry["styles"] = styles
            self._store(index.voices, index.skipped)
            if isinstance(replaced, dict):
                self._forget_audio(replaced.get("audio_file"), {**index.skipped, **index.voices})
        return dict(entry)

    def remove_style(self, name: str, style: str) -> dict:
        """Forget the voice's recording of ``style`` (not its own: delete or replace the voice for that)."""
        with self._lock:
            index = self._read()
            entry = index.voices.get(name)
            if entry is None:
                raise VoiceError(f"there is no saved voice named {name!r}")
            styles = dict(entry.get("styles") or {})
            if style not in styles:
                own = entry.get("style") or DEFAULT_STYLE
                hint = " (its own recording: replace or delete the voice)" if style == own else ""
                raise VoiceError(f"the voice {name!r} has no other recording of the style {style!r}{hint}")
            removed = styles.pop(style)
            entry["styles"] = styles
            self._store(index.voices, index.skipped)
            if isinstance(removed, dict):
                self._forget_audio(removed.get("audio_file"), {**index.skipped, **index.voices})
        return dict(entry)

    def adopt(self, voices: list[dict]) -> list[dict]:
        """Add voices read from a voices file, already checked by the one voice rule (``voice_transfer``):
        each ``{"name", "created", "recordings": [{"style", "audio_hash", "transcript", "audio", "suffix",
        "model_id"}]}`` with the recording's bytes in ``audio``. A name taken (or taken earlier in ``voices``)
        is renamed ``name (2)``, ``name (3)``, ...; the entries saved, each with ``imported_as``. The index is
        written once, after every recording's file: a failure on the way leaves the voice list as it was."""
        with self._lock:
            index = self._read()
            taken = {existing.casefold() for existing in [*index.voices, *index.skipped]}
            self.folder.mkdir(parents=True, exist_ok=True)
            saved = []
            for voice in voices:
                name = _free_name(voice["name"], taken)
                taken.add(name.casefold())
                own, *others = [self._adopted_recording(recording) for recording in voice["recordings"]]
                entry = {
                    "name": name,
                    **{key: value for key, value in own.items() if key != "style"},
                    "created": voice.get("created") or time.time(),
                    "style": own["style"],
                    "styles": {recording.pop("style"): recording for recording in others},
                }
                index.voices[name] = entry
                saved.append({**entry, "imported_as": name, "name_in_file": voice["name"]})
            self._store(index.voices, index.skipped)
        return saved

    def _adopted_recording(self, recording: dict) -> dict:
        """A recording's copy written (its file named by its content hash: the same recording is one file)."""
        target = f"{check_audio_hash(recording['audio_hash'])}{recording['suffix'] or '.wav'}"
        if not (self.folder / target).exists():
            atomic_write(self.folder / target, recording["audio"])
        return {
            "style": recording["style"],
            "audio_hash": recording["audio_hash"],
            "model_id": recording.get("model_id"),
            "transcript": recording.get("transcript"),
            "created": recording.get("created") or time.time(),
            "audio_file": target,
        }

    def _recordings_of(self, entry: dict) -> list[dict]:
        own = {key: entry.get(key) for key in RECORDING_KEYS}
        listed = [{"style": entry.get("style") or DEFAULT_STYLE, **own}]
        styles = entry.get("styles") if isinstance(entry.get("styles"), dict) else {}
        good, _ = typed_records(styles, RECORDING_SHAPE, f"the styles of the saved voice {entry['name']!r}")
        listed += [{"style": style, **{key: good[style].get(key) for key in RECORDING_KEYS}} for style in sorted(good)]
        for recording in listed:
            audio_file = recording.get("audio_file")
            recording["audio_path"] = str(self.folder / audio_file) if audio_file else None
        return listed


def _free_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name (2)``, ``name (3)``, ... the first not in ``taken`` (casefolded), within the length
    a name may have."""
    if name.casefold() not in taken:
        return name
    for number in range(2, 10_000):
        suffix = f" ({number})"
        candidate = name[: MAX_VOICE_NAME - len(suffix)] + suffix
        if candidate.casefold() not in taken:
            return candidate
    raise VoiceError(f"no free name is left for the voice {name!r}")
