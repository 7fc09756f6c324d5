"""Saved voices carried between machines: a voice or the whole library exported as one voices file
(``voice_file.py``: every recording with its style and transcript, and each recording's cached prompt
features for every model that has them, so an import on the same model needs no re-encoding), and a voices
file imported into the library.

An import is all or nothing. The file is read and checked whole first (``read_voice_file``: a zip of safe
members within ``request.VOICE_FILE_LIMITS``, a known version, recordings that decode), then every recording
passes the one voice rule (``voice_rules``: name, style, transcript, a recording a job could use) and its
content hash is computed again (features are filed under it: a file cannot slip features under another
recording's hash), then every features entry is checked against its facts. Only then is anything written,
and only under the cache folder, at names the library makes from content hashes: recordings in ``voices/``,
features in the speaker cache, the voice list last. A name taken is renamed ``name (2)``.

Computing a recording's content hash loads the prompt decoder (torch) in the importing process, once.
"""

from __future__ import annotations

import io
from pathlib import Path

from cosyvoice_mac.engine import cache
from cosyvoice_mac.engine.voice_rules import (
    VoiceError,
    check_style,
    check_transcript,
    check_voice_name,
    judge_voice_audio,
)
from cosyvoice_mac.request import VOICE_FILE_LIMITS
from cosyvoice_mac.voice_file import (
    SUFFIX,
    Features,
    Recording,
    VoiceEntry,
    VoiceFileRefused,
    read_voice_file,
    write_voice_file,
)

__all__ = ["SUFFIX", "VoiceFileRefused", "export_voices", "import_voices"]


def export_voices(library, names: list[str] | None = None) -> bytes:
    """The voices file of the saved voices ``names`` (None: every one) of ``library``; VoiceError when a
    name is unknown, a voice has a recording whose copy is gone, or there is no voice to export."""
    from cosyvoice_mac import __version__

    names = [entry["name"] for entry in library.list()] if names is None else list(names)
    if not names:
        raise VoiceError("there are no saved voices to export yet")
    root = library.folder.parent
    voices = []
    for name in names:
        entry = library.get(name)
        recordings = []
        for recording in library.recordings(name):
            path = Path(recording["audio_path"]) if recording["audio_path"] else None
            if path is None or not path.is_file():
                raise VoiceError(
                    f"the voice {name!r} has no copy of its {recording['style']!r} recording to export; "
                    "give it the recording again (replace it) and export once more"
                )
            features = [
                Features(model_id, tensors.read_bytes(), facts.read_bytes())
                for model_id, tensors, facts in cache.entry_files(root, recording["audio_hash"])
            ]
            audio, suffix = _portable_audio(path)
            recordings.append(
                Recording(
                    style=recording["style"],
                    transcript=recording["transcript"],
                    audio=audio,
                    suffix=suffix,
                    audio_hash=recording["audio_hash"],
                    created=recording["created"] or 0.0,
                    model_id=recording["model_id"],
                    features=features,
                )
            )
        voices.append(VoiceEntry(entry["name"], entry.get("created") or 0.0, recordings))
    return write_voice_file(voices, app=f"cosyvoice-mac {__version__}")


def import_voices(library, source: str | Path | bytes, limits=VOICE_FILE_LIMITS) -> list[dict]:
    """Add the voices of a voices file (a path or its bytes) to ``library``, all or none: the entries saved
    (each with ``imported_as``, ``name_in_file`` and ``features``: the models whose features came with it).
    VoiceFileRefused saying why, with nothing written."""
    read = read_voice_file(source, limits)
    root = library.folder.parent
    adopted, feature_files = [], []
    for voice in read.voices:
        name = _checked(check_voice_name, voice.name, f"the voice {voice.name[:80]!r}")
        recordings, models, styles = [], set(), set()
        for recording in voice.recordings:
            where = f"the voice {name!r}, style {recording.style!r}"
            style = _checked(check_style, recording.style, where)
            if style.casefold() in styles:  # the library tells styles apart as it shows them: case-blind
                raise VoiceFileRefused("manifest", f"the voice {name!r} has two recordings of the style {style!r}")
            styles.add(style.casefold())
            transcript = _checked(check_transcript, recording.transcript, where)
            _check_recording(recording, where)
            for features in recording.features:
                if features.facts and _is_other_format(features.facts):
                    continue  # written by another cache format: extracted again on first use
                problem = cache.entry_problem(features.model_id, recording.audio_hash, features.tensors, features.facts)
                if problem is not None:
                    raise VoiceFileRefused("damaged", f"the features of {where} for {features.model_id}: {problem}")
                feature_files.append((features.model_id, recording.audio_hash, features.tensors, features.facts))
                models.add(features.model_id)
            recordings.append(
                {
                    "style": style,
                    "transcript": transcript,
                    "audio_hash": recording.audio_hash,
                    "audio": recording.audio,
                    "suffix": recording.suffix,
                    "model_id": recording.model_id,
                    "created": recording.created,
                }
            )
        adopted.append({"name": name, "created": voice.created, "recordings": recordings, "features": models})
    for model_id, audio_hash, tensors, facts in feature_files:
        cache.store_entry_files(root, model_id, audio_hash, tensors, facts)
    saved = library.adopt(adopted)
    for entry, voice in zip(saved, adopted):
        entry["features"] = sorted(voice["features"])
    return saved


def _portable_audio(path: Path) -> tuple[bytes, str]:
    """The recording's bytes and suffix as the file carries them: as kept, when soundfile (the only decoder a
    reader of the file is sure to have) reads them, else a float WAV of the samples the app's reader decodes
    (the same samples: the content hash, and so the features, still match)."""
    import soundfile

    from cosyvoice_mac.sound.read import read_audio

    data = path.read_bytes()
    try:
        soundfile.info(io.BytesIO(data))
        return data, path.suffix.lower()
    except Exception:  # libsndfile raises several types on formats it lacks
        samples, rate = read_audio(path)
    encoded = io.BytesIO()
    soundfile.write(encoded, samples, rate, subtype="FLOAT", format="WAV")
    return encoded.getvalue(), ".wav"


def _checked(rule, value, where: str):
    """``rule(value)``; its VoiceError as the file's refusal, naming the voice in the file."""
    try:
        return rule(value)
    except VoiceError as error:
        raise VoiceFileRefused("voice", f"{where} in the voices file: {error}") from None


def _check_recording(recording: Recording, where: str) -> None:
    """The one voice rule on the recording's samples, and its content hash computed again: the manifest's
    must be the recording's own, since its features are filed under it."""
    from cosyvoice_mac.errors import InputError
    from cosyvoice_mac.frontend.prompt_audio import decode_prompt

    check = judge_voice_audio(samples=recording.samples, sample_rate=recording.sample_rate)
    if check is not None and not check.ok:
        raise VoiceFileRefused("audio", f"the recording of {where} cannot be a voice: {check.sentence}")
    try:
        content_hash = decode_prompt(recording.samples, recording.sample_rate).content_hash
    except InputError as error:
        raise VoiceFileRefused("audio", f"the recording of {where} cannot be a voice: {error}") from None
    if content_hash != recording.audio_hash:
        raise VoiceFileRefused(
            "damaged", f"the recording of {where} is not the one its manifest describes (its content hash differs)"
        )


def _is_other_format(facts: bytes) -> bool:
    import json

    try:
        described = json.loads(facts.decode("utf-8"))
    except ValueError:
        return False
    return isinstance(described, dict) and described.get("format") != cache.CACHE_FORMAT
