"""The voices file: saved voices carried between machines as one zip with a versioned manifest.

Layout (every member name is the writer's own; a name inside the file never names a place on disk)::

    manifest.json              {"format": FORMAT, "version": VERSION, "created", "app", "voices": [...]}
    audio/<n><suffix>          each recording's bytes as the library keeps them
    features/<n>.safetensors   a recording's cached prompt features for one model (the speaker cache's entry)
    features/<n>.json          that entry's facts (model id, audio hash, shapes)

Each voice is ``{"name", "created", "recordings": [...]}``; each recording ``{"style", "transcript", "created",
"audio", "bytes", "sha256", "audio_hash", "model_id", "features": [{"model_id", "tensors", "facts"}]}``, the
first recording the voice's own (the one a request without a style speaks with).

:func:`read_voice_file` refuses a file before anything is written: not a zip, damaged, over the limits
(``request.VOICE_FILE_LIMITS``, passed in), a member that is a link or names a folder outside the file
(``../``, an absolute or drive path), a manifest of another format or version, a recording whose bytes differ
from the manifest's or that does not decode. What it returns is in memory. Torch-free (numpy, soundfile), and
below the request contract, whose ``Voice.load`` reads a voice from a file: recordings are decoded by
soundfile alone (the exporter writes any recording soundfile cannot read as a WAV of its decoded samples).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import stat
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from cosyvoice_mac.errors import InputError
from cosyvoice_mac.style_names import style_name

FORMAT = "cosyvoice-mac voices"
VERSION = 1  # bump when a reader of this version would misread a newer file
MANIFEST = "manifest.json"
SUFFIX = ".cvvoices.zip"  # what the doors name an exported file (it opens as a zip anywhere)


@dataclass(frozen=True)
class VoiceFileLimits:
    """What a voices file may hold, checked before anything in it is decoded or written (the numbers:
    ``request.VOICE_FILE_LIMITS``): its bytes packed and unpacked in all, its members, and each member by kind."""

    file_bytes: int
    members: int
    manifest_bytes: int
    recording_bytes: int
    features_bytes: int
    recordings_per_voice: int


class VoiceFileRefused(InputError):
    """A voices file that cannot be imported; the message says why, ``code`` names the rule (``not_zip``,
    ``damaged``, ``too_large``, ``unsafe_member``, ``version``, ``manifest``, ``audio``, ``voice``, ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message, field="file")
        self.code = code


@dataclass
class Features:
    """One model's cached prompt features of a recording, as the speaker cache stores them."""

    model_id: str
    tensors: bytes
    facts: bytes


@dataclass
class Recording:
    """One recording of a voice: its style (``style_names``: one lowercase word), transcript and bytes;
    ``samples`` (N, C) float32 at ``sample_rate`` once read."""

    style: str
    transcript: str | None
    audio: bytes
    suffix: str
    audio_hash: str
    created: float
    model_id: str | None = None  # the model its features were first made for (the library's entry field)
    features: list[Features] = field(default_factory=list)
    samples: np.ndarray | None = None
    sample_rate: int = 0


@dataclass
class VoiceEntry:
    name: str
    created: float
    recordings: list[Recording]


@dataclass
class VoiceFile:
    version: int
    created: float
    voices: list[VoiceEntry]

    def recording(self, name: str | None = None, style: str | None = None) -> Recording:
        """The recording of ``style`` (None: the first) of voice ``name`` (None: the only voice)."""
        names = [voice.name for voice in self.voices]
        if name is None and len(self.voices) != 1:
            raise VoiceFileRefused("voice", f"the file holds {len(names)} voices ({', '.join(names)}); name one")
        voice = self.voices[0] if name is None else next((v for v in self.voices if v.name == name), None)
        if voice is None:
            raise VoiceFileRefused("voice", f"the file holds no voice named {name!r} (it holds {', '.join(names)})")
        if style is None:
            return voice.recordings[0]
        for recording in voice.recordings:
            if recording.style == style.strip().lower():  # names are kept lowercased (style_names)
                return recording
        styles = ", ".join(recording.style for recording in voice.recordings)
        raise VoiceFileRefused("voice", f"the voice {voice.name!r} has no {style!r} recording (it has {styles})")


def write_voice_file(voices: list[VoiceEntry], app: str) -> bytes:
    """The voices file of ``voices`` (each recording's bytes and features), as bytes."""
    manifest = {"format": FORMAT, "version": VERSION, "created": time.time(), "app": app, "voices": []}
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        counter = 0
        for voice in voices:
            described = {"name": voice.name, "created": voice.created, "recordings": []}
            for recording in voice.recordings:
                counter += 1
                audio_name = f"audio/{counter}{recording.suffix}"
                archive.writestr(audio_name, recording.audio)
                features = []
                for number, cached in enumerate(recording.features, 1):
                    stem = f"features/{counter}-{number}"
                    archive.writestr(f"{stem}.safetensors", cached.tensors)
                    archive.writestr(f"{stem}.json", cached.facts)
                    features.append(
                        {"model_id": cached.model_id, "tensors": f"{stem}.safetensors", "facts": f"{stem}.json"}
                    )
                described["recordings"].append(
                    {
                        "style": recording.style,
                        "transcript": recording.transcript,
                        "created": recording.created,
                        "audio": audio_name,
                        "bytes": len(recording.audio),
                        "sha256": hashlib.sha256(recording.audio).hexdigest(),
                        "audio_hash": recording.audio_hash,
                        "model_id": recording.model_id,
                        "features": features,
                    }
                )
            manifest["voices"].append(described)
        archive.writestr(MANIFEST, json.dumps(manifest, ensure_ascii=False, indent=1))
    return packed.getvalue()


def read_voice_file(source: str | Path | bytes, limits) -> VoiceFile:
    """The checked contents of a voices file (a path or its bytes), its recordings decoded; VoiceFileRefused
    saying why not. ``limits``: ``request.VOICE_FILE_LIMITS`` (tests pass smaller ones)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as error:
            raise VoiceFileRefused("missing", f"the voices file {path} cannot be read ({error.strerror})") from None
        _check_size("the voices file", size, limits.file_bytes)
        source = path.read_bytes()
    _check_size("the voices file", len(source), limits.file_bytes)
    try:
        archive = zipfile.ZipFile(io.BytesIO(source))
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise VoiceFileRefused(
            "not_zip", "this is not a voices file: it is no zip archive (or it was cut short); export it again"
        ) from None
    with archive:
        members = _checked_members(archive, limits)
        manifest = _manifest(archive, members, limits)
        voices = [_voice(archive, members, described, limits) for described in manifest["voices"]]
    return VoiceFile(manifest["version"], _time(manifest.get("created")), voices)


def _check_size(what: str, size: int, limit: int) -> None:
    if size > limit:
        raise VoiceFileRefused("too_large", f"{what} holds {size:,} bytes; the limit is {limit:,}")


def _checked_members(archive: zipfile.ZipFile, limits) -> dict[str, zipfile.ZipInfo]:
    """Every member by name, once each is known to be a plain file with a safe name, and the sizes it
    declares within the limits (so nothing is unpacked past them)."""
    infos = archive.infolist()
    if len(infos) > limits.members:
        raise VoiceFileRefused(
            "too_large", f"the voices file holds {len(infos):,} members; the limit is {limits.members:,}"
        )
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        parts = PurePosixPath(name).parts
        if (
            not name
            or name.startswith("/")
            or "\\" in name
            or ":" in name
            or any(part in ("..", ".") for part in parts)
            or any(ord(char) < 32 for char in name)
        ):
            raise VoiceFileRefused(
                "unsafe_member", f"the voices file names a member {name[:80]!r} outside its own folders; refused"
            )
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG) and not info.is_dir():
            raise VoiceFileRefused(
                "unsafe_member", f"the member {name[:80]!r} of the voices file is a link or a device, not a file"
            )
        if name in members:
            raise VoiceFileRefused("unsafe_member", f"the voices file holds the member {name[:80]!r} twice")
        members[name] = info
    _check_size("unpacked, the voices file", sum(info.file_size for info in infos), limits.file_bytes)
    return members


def _read(archive: zipfile.ZipFile, members: dict, name, limit: int, what: str) -> bytes:
    if not isinstance(name, str) or name not in members or members[name].is_dir():
        raise VoiceFileRefused("manifest", f"the voices file lacks {what} ({str(name)[:80]!r}) that its manifest names")
    _check_size(what, members[name].file_size, limit)
    try:
        data = archive.read(members[name])
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError) as error:
        raise VoiceFileRefused("damaged", f"{what} in the voices file is damaged ({error}); export it again") from None
    except RuntimeError:  # zipfile's word for an encrypted member
        raise VoiceFileRefused("damaged", f"{what} in the voices file is encrypted; export it again") from None
    _check_size(what, len(data), limit)
    return data


def _manifest(archive: zipfile.ZipFile, members: dict, limits) -> dict:
    if MANIFEST not in members:
        raise VoiceFileRefused("manifest", f"this is not a voices file: the zip has no {MANIFEST}")
    raw = _read(archive, members, MANIFEST, limits.manifest_bytes, "the manifest")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise VoiceFileRefused("manifest", f"the voices file's {MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise VoiceFileRefused("manifest", f"this zip is not a voices file (its manifest is not of {FORMAT!r})")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise VoiceFileRefused("version", f"the voices file's version {version!r} is not a version number")
    if version > VERSION:
        raise VoiceFileRefused(
            "version",
            f"the voices file is version {version}, made by a newer cosyvoice-mac; this one reads version "
            f"{VERSION}: update the app to import it",
        )
    if not isinstance(manifest.get("voices"), list) or not manifest["voices"]:
        raise VoiceFileRefused("manifest", "the voices file holds no voices")
    return manifest


def _voice(archive: zipfile.ZipFile, members: dict, described, limits) -> VoiceEntry:
    if not isinstance(described, dict) or not isinstance(described.get("name"), str):
        raise VoiceFileRefused("manifest", "a voice in the voices file has no name")
    name = described["name"]
    recordings = described.get("recordings")
    if not isinstance(recordings, list) or not 1 <= len(recordings) <= limits.recordings_per_voice:
        raise VoiceFileRefused(
            "manifest", f"the voice {name[:80]!r} must hold 1-{limits.recordings_per_voice} recordings"
        )
    read = [_recording(archive, members, name, item, limits) for item in recordings]
    styles = [recording.style for recording in read]
    if len(set(styles)) != len(styles):
        raise VoiceFileRefused("manifest", f"the voice {name[:80]!r} has two recordings of one style")
    return VoiceEntry(name, _time(described.get("created")), read)


def _recording(archive: zipfile.ZipFile, members: dict, voice: str, item, limits) -> Recording:
    where = f"the voice {voice[:80]!r}"
    if not isinstance(item, dict):
        raise VoiceFileRefused("manifest", f"{where} lists a recording that is not a record")
    try:  # the one style rule, the library's and the inline tags' (a file made elsewhere may break it)
        style = style_name(item.get("style"))
    except ValueError as error:
        raise VoiceFileRefused("manifest", f"{where} has a recording whose style breaks the rule: {error}") from None
    transcript = item.get("transcript")
    if transcript is not None and not isinstance(transcript, str):
        raise VoiceFileRefused("manifest", f"{where}, style {style!r}: the transcript is not text")
    where = f"{where}, style {style!r}"
    audio = _read(archive, members, item.get("audio"), limits.recording_bytes, f"the recording of {where}")
    if len(audio) != item.get("bytes") or hashlib.sha256(audio).hexdigest() != item.get("sha256"):
        raise VoiceFileRefused("damaged", f"the recording of {where} is not the one exported (its bytes differ)")
    if not isinstance(item.get("audio_hash"), str):
        raise VoiceFileRefused("manifest", f"{where}: the recording's content hash is missing")
    features = []
    for cached in item.get("features") or []:
        if not isinstance(cached, dict) or not isinstance(cached.get("model_id"), str):
            raise VoiceFileRefused("manifest", f"{where}: a features entry names no model")
        tensors = _read(archive, members, cached.get("tensors"), limits.features_bytes, f"the features of {where}")
        facts = _read(archive, members, cached.get("facts"), limits.features_bytes, f"the features of {where}")
        features.append(Features(cached["model_id"], tensors, facts))
    suffix = PurePosixPath(item["audio"]).suffix.lower()
    suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix) else ".wav"  # it names the library's copy
    model_id = item.get("model_id") if isinstance(item.get("model_id"), str) else None
    recording = Recording(
        style, transcript, audio, suffix, item["audio_hash"], _time(item.get("created")), model_id, features
    )
    recording.samples, recording.sample_rate = _decoded(audio, where)
    return recording


def _decoded(audio: bytes, where: str) -> tuple[np.ndarray, int]:
    """The recording's samples, (N, C) float32, and their rate."""
    import soundfile  # here: the request contract imports this module, and most requests read no voices file

    try:
        samples, rate = soundfile.read(io.BytesIO(audio), dtype="float32", always_2d=True)
    except Exception as error:  # libsndfile raises several types on damaged or foreign data
        raise VoiceFileRefused("audio", f"the recording of {where} cannot be decoded ({error})") from None
    if samples.shape[0] == 0 or not np.isfinite(samples).all():
        raise VoiceFileRefused("audio", f"the recording of {where} holds no usable samples")
    return samples, int(rate)


def _time(value) -> float:
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e11 else 0.0
    )
