"""Voices with several recordings (styles), carried between machines as one voices file: a round trip keeps
the recordings, transcripts, styles and cached features (an import on the same model needs no re-encoding);
a damaged, cut, oversized, path-traversing, linking or newer file is refused with its reason and nothing
written; ``Voice.load`` reads a voice from the file in memory.

One library of two voices is built for the module (espeak speech, tiny feature tensors in the speaker cache);
each test copies the folder it changes."""

from __future__ import annotations

import io
import json
import shutil
import stat
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac import Voice
from cosyvoice_mac.engine.cache import SpeakerCache
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.engine.voice_rules import VoiceAudioRefused, VoiceError, VoiceExists
from cosyvoice_mac.engine.voice_transfer import export_voices, import_voices
from cosyvoice_mac.frontend.prompt_audio import decode_prompt
from cosyvoice_mac.pipeline.types import SpeakerPrompt
from cosyvoice_mac.request import VOICE_FILE_LIMITS
from cosyvoice_mac.voice_file import MANIFEST, VoiceFileRefused

MODEL = "tiny-cosyvoice3-voicefile"


def _features(audio_hash: str, frames: int) -> SpeakerPrompt:
    generator = torch.Generator().manual_seed(frames)
    return SpeakerPrompt(
        speech_tokens=torch.randint(0, 6561, (1, frames), generator=generator),
        mel=torch.randn(1, 2 * frames, 80, generator=generator),
        embedding=torch.randn(1, 192, generator=generator),
        audio_hash=audio_hash,
        model_id=MODEL,
        duration_s=2.0,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory, make_speech):
    """A cache folder whose library holds Alice (neutral + whisper, features for both) and Bob (no features)."""
    root = tmp_path_factory.mktemp("voice-library")
    library, cache = VoiceLibrary(root), SpeakerCache(root)
    clips = {
        "alice": make_speech("Hello there, this is Alice speaking clearly today.", seconds=4.0),
        "whisper": make_speech("A quieter sentence from Alice, almost a whisper.", seconds=4.0),
        "bob": make_speech("Bob here, reading a short line for the test.", seconds=4.0),
    }
    hashes = {key: decode_prompt(str(path)).content_hash for key, path in clips.items()}
    library.save("Alice", audio_hash=hashes["alice"], model_id=MODEL, transcript="Hello there.", audio=clips["alice"])
    library.add_style(
        "Alice", "whisper", audio_hash=hashes["whisper"], model_id=MODEL, transcript="A quieter one.",
        audio=clips["whisper"],
    )  # fmt: skip
    library.save("Bob", audio_hash=hashes["bob"], model_id="recording", audio=clips["bob"])
    cache.put(_features(hashes["alice"], 7))
    cache.put(_features(hashes["whisper"], 5))
    return root, hashes, clips


@pytest.fixture()
def copied(built, tmp_path):
    """A copy of the built cache folder for one test: (root, library)."""
    root = tmp_path / "cache"
    shutil.copytree(built[0], root)
    return root, VoiceLibrary(root)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _rezip(data: bytes, change_manifest=None, extra: list[tuple[zipfile.ZipInfo | str, bytes]] = ()) -> bytes:
    """The voices file ``data`` written again, its manifest changed by ``change_manifest``, with ``extra``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename == MANIFEST and change_manifest is not None:
                manifest = json.loads(content)
                change_manifest(manifest)
                content = json.dumps(manifest).encode()
            target.writestr(info.filename, content)
        for info, content in extra:
            target.writestr(info, content)
    return out.getvalue()


def test_a_voice_keeps_its_styles_and_each_recording_passes_the_voice_rule(copied, built, tmp_path):
    root, library = copied
    recordings = library.recordings("Alice")
    assert [(r["style"], r["transcript"]) for r in recordings] == [
        ("neutral", "Hello there."),
        ("whisper", "A quieter one."),
    ]
    assert library.styled("Alice", "Whisper")["audio_hash"] == built[1]["whisper"]
    with pytest.raises(VoiceExists, match="already has a 'whisper' recording"):
        library.add_style("Alice", "whisper", audio_hash=built[1]["bob"], model_id=MODEL, audio=built[2]["bob"])
    tone = tmp_path / "tone.wav"
    soundfile.write(tone, 0.3 * np.sin(2 * np.pi * 220 * np.arange(72000) / 24000), 24000)
    with pytest.raises(VoiceAudioRefused, match="no speech"):
        library.add_style("Alice", "happy", audio_hash="c" * 64, model_id=MODEL, audio=tone)
    with pytest.raises(VoiceError, match="a style is one word of 2 to 24 letters"):
        library.add_style("Alice", "x" * 40, audio_hash="c" * 64, model_id=MODEL, audio=built[2]["bob"])
    whisper_file = root / "voices" / recordings[1]["audio_file"]
    library.remove_style("Alice", "whisper")
    assert not whisper_file.exists() and [r["style"] for r in library.recordings("Alice")] == ["neutral"]
    with pytest.raises(VoiceError, match="has no 'whisper' recording"):
        library.styled("Alice", "whisper")


def test_export_delete_import_gives_the_same_voices_recordings_and_features(copied, built):
    root, library = copied
    before = {name: library.recordings(name) for name in ("Alice", "Bob")}
    features_before = {p.name: p.read_bytes() for p in (root / "speakers").rglob("*.safetensors")}
    exported = export_voices(library)
    for name in ("Alice", "Bob"):
        library.delete(name)
    shutil.rmtree(root / "speakers")  # a machine that never extracted them
    assert not list((root / "voices").glob("*.wav"))

    saved = import_voices(library, exported)
    assert [(entry["imported_as"], entry["features"]) for entry in saved] == [("Alice", [MODEL]), ("Bob", [])]
    for name in ("Alice", "Bob"):
        after = library.recordings(name)
        keys = ("style", "transcript", "audio_hash", "model_id", "audio_file")
        assert [{k: r[k] for k in keys} for r in after] == [{k: r[k] for k in keys} for r in before[name]]
        for recording, clip in zip(after, [built[2][name.lower()], built[2]["whisper"]]):
            assert Path(recording["audio_path"]).read_bytes() == Path(clip).read_bytes()
    assert {p.name: p.read_bytes() for p in (root / "speakers").rglob("*.safetensors")} == features_before
    cached, source = SpeakerCache(root).lookup(MODEL, built[1]["whisper"])  # no re-encoding needed
    assert source == "disk" and torch.equal(cached.mel, _features(built[1]["whisper"], 5).mel)

    again = import_voices(library, export_voices(library, ["Alice"]))  # the name is taken now
    assert again[0]["imported_as"] == "Alice (2)" and len(library.recordings("Alice (2)")) == 2


def _refused(library, root, data, code: str, says: str, limits=VOICE_FILE_LIMITS) -> None:
    before = _snapshot(root)
    with pytest.raises(VoiceFileRefused, match=says) as refused:
        import_voices(library, data, limits)
    assert refused.value.code == code
    assert _snapshot(root) == before, "a refused file changed the cache folder"


def _link(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _newer(manifest):
    manifest["version"] = 2


def _lying_hash(manifest):
    recordings = manifest["voices"][0]["recordings"]
    recordings[0]["audio_hash"] = recordings[1]["audio_hash"]


def _unspeakable_style(manifest):  # made elsewhere: a name no inline (style) tag could ask for
    manifest["voices"][0]["recordings"][1]["style"] = "very quiet"


@pytest.mark.parametrize(
    ("damage", "code", "says"),
    [
        (lambda data: data[: len(data) // 2], "not_zip", "no zip archive"),
        (lambda data: data[:200] + bytes(400) + data[600:], "damaged", "damaged|not the one exported"),
        (lambda data: _rezip(data, extra=[("../escaped.txt", b"x")]), "unsafe_member", "outside its own"),
        (lambda data: _rezip(data, extra=[("/tmp/absolute.txt", b"x")]), "unsafe_member", "outside its own"),
        (lambda data: _rezip(data, extra=[(_link("audio/link.wav"), b"/etc/passwd")]), "unsafe_member", "a link"),
        (lambda data: _rezip(data, _newer), "version", "made by a newer cosyvoice-mac"),
        (lambda data: _rezip(data, _lying_hash), "damaged", "content hash differs"),
        (lambda data: _rezip(data, _unspeakable_style), "manifest", "style breaks the rule: a style is one word"),
        (lambda data: b"PK\x03\x04 not really", "not_zip", "no zip archive"),
    ],
    ids=[
        "truncated",
        "corrupted",
        "dotdot",
        "absolute",
        "symlink",
        "newer-version",
        "lying-hash",
        "bad-style",
        "not-a-zip",
    ],
)
def test_a_bad_voices_file_is_refused_with_its_reason_and_nothing_written(copied, damage, code, says):
    root, library = copied
    exported = export_voices(library, ["Alice"])
    library.delete("Alice")
    _refused(library, root, damage(exported), code, says)


def test_an_oversized_voices_file_is_refused_before_it_is_unpacked(copied, tmp_path):
    root, library = copied
    exported = export_voices(library, ["Alice"])
    small = replace(VOICE_FILE_LIMITS, file_bytes=len(exported) - 1)
    _refused(library, root, exported, "too_large", "the limit is", small)
    bomb = _rezip(exported, extra=[("features/padding.bin", bytes(2 << 20))])  # packs to a few kB
    unpacked = replace(VOICE_FILE_LIMITS, file_bytes=1 << 20)
    assert len(bomb) < unpacked.file_bytes
    _refused(library, root, bomb, "too_large", "unpacked, the voices file", unpacked)


def test_voice_load_reads_a_voice_and_its_styles_from_the_file_in_memory(copied, built, tmp_path):
    root, library = copied
    path = tmp_path / "alice.cvvoices.zip"
    path.write_bytes(export_voices(library, ["Alice"]))
    before = _snapshot(root)
    voice = Voice.load(path)
    expected, rate = soundfile.read(built[2]["alice"], dtype="float32", always_2d=True)
    assert voice.kind == "samples" and voice.transcript == "Hello there." and voice.sample_rate == rate
    assert np.array_equal(voice.samples, expected)
    assert Voice.load(path, style="whisper").transcript == "A quieter one."
    with pytest.raises(VoiceFileRefused, match="has no 'happy' recording"):
        Voice.load(path, style="happy")
    assert _snapshot(root) == before


def test_a_style_belongs_to_a_saved_voice_and_the_library_speaks_the_one_asked_for(copied, built):
    from cosyvoice_mac.engine.voice_rules import VoiceStyleUnknown
    from cosyvoice_mac.errors import RequestError
    from cosyvoice_mac.request import Request

    root, library = copied
    _, hashes, clips = built
    assert library.styled("Alice", None)["audio_hash"] == hashes["alice"]
    with pytest.raises(VoiceStyleUnknown, match="no 'happy' recording; its styles: neutral, whisper"):
        library.styled("Alice", "happy")
    voice = library.recording_voice("Alice", "WHISPER")  # the Python door, for a model loaded in this process
    assert voice.transcript == "A quieter one." and Path(voice.audio).read_bytes() == clips["whisper"].read_bytes()
    for refused, code in [
        (Voice.recording(clips["bob"]), "style_needs_saved_voice"),
        (Voice.builtin(), "style_needs_saved_voice"),
        (Voice.saved_voice("Alice"), "style_invalid"),
    ]:
        with pytest.raises(RequestError) as error:
            Request.build("Hi.", replace(refused, style="x" * 33 if refused.saved else "whisper"), seed=1)
        assert (error.value.field, error.value.code) == ("style", code)
    request = Request.build("Hi.", Voice.saved_voice("Alice", style=" whisper "), seed=1)
    assert request.voice.style == "whisper" and request.facts()["style"] == "whisper"
    assert "style" not in Request.build("Hi.", Voice.saved_voice("Alice"), seed=1).facts()
