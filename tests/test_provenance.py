"""Content credentials (C2PA) on every output: signed into WAV, FLAC and MP3 with the AI-generated claim and what
made the file, the audio untouched; this install's key made once and kept private; an organisation's
certificate instead; ``verify`` telling a changed file; the setting that turns it all off.

Each output is read back with c2pa-python's own Reader (``tests.provenance_check``), not only with the app's
``verify``. The doors' own outputs are checked where their tests already make them (tests/api)."""

from __future__ import annotations

import io
import json
import stat
import struct

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.api import audio_formats
from cosyvoice_mac.cli.main import main
from cosyvoice_mac.engine.outputs import write_output
from cosyvoice_mac.longform.files import ResultFiles
from cosyvoice_mac.longform.runner import Spoken, run_batch, run_dialogue, run_dub
from cosyvoice_mac.provenance import keys, read_credentials, with_credentials
from cosyvoice_mac.provenance.claim import GENERATION_LABEL
from cosyvoice_mac.provenance.verify import CHANGED, NONE, VALID
from cosyvoice_mac.settings import setting
from cosyvoice_mac.sound.wav import read_samples, wav_bytes
from tests.provenance_check import MEDIA_TYPES, ai_credentials

RATE = 24000
FACTS = {
    "text": "words nobody else should read",
    "mode": "zero_shot",
    "model": "Fun-CosyVoice3-0.5B",
    "version": "cosyvoice3",
    "engine": "torch",
    "prompt_hash": "ab" * 32,
    "seed": 7,
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def own_cache(cache, monkeypatch):
    """This module's own cache folder (its install key made once for the module), credentials on."""
    monkeypatch.setenv(setting("cache_dir").env, str(cache))
    for name in ("content_credentials", "signing_cert", "signing_key"):
        monkeypatch.delenv(setting(name).env, raising=False)


def _speechlike(seconds=0.5):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


def _chunks(wav: bytes) -> dict[bytes, bytes]:
    found, offset = {}, 12
    while offset + 8 <= len(wav):
        name, size = wav[offset : offset + 4], struct.unpack("<I", wav[offset + 4 : offset + 8])[0]
        found[name] = wav[offset + 8 : offset + 8 + size]
        offset += 8 + size + size % 2
    return found


def _decoded(data: bytes, kind: str) -> np.ndarray:
    return soundfile.read(io.BytesIO(data), dtype="float32" if kind == "mp3" else "int16")[0]


@pytest.mark.parametrize("kind", ["wav", "flac", "mp3"])
def test_each_format_carries_the_ai_claim_and_what_made_it_and_decodes_to_the_same_samples(kind):
    audio = _speechlike()
    plain = audio_formats.encode(audio, RATE, kind)
    signed = audio_formats.encode(audio, RATE, kind, FACTS)
    assert signed != plain
    generation = ai_credentials(signed, kind)[GENERATION_LABEL]
    assert generation["model"] == "Fun-CosyVoice3-0.5B" and generation["model_version"] == "cosyvoice3"
    assert generation["engine"] == "torch" and generation["voice_hash"] == "ab" * 32
    assert generation["created"].endswith("+00:00")
    assert FACTS["text"] not in signed.decode("latin-1")  # the text stays in the sidecar, never in the file
    assert np.array_equal(_decoded(signed, kind), _decoded(plain, kind))  # playable, the same audio
    if kind == "wav":  # the audio data itself is byte for byte the same
        assert _chunks(signed)[b"data"] == _chunks(plain)[b"data"] and b"C2PA" in _chunks(signed)


def test_the_install_key_is_made_on_first_use_kept_private_and_reused(cache):
    folder = cache / keys.IDENTITY_FOLDER
    first = keys.signing_identity()
    path = folder / keys.IDENTITY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert keys.signing_identity() == first and first.source == "install" and len(first.certificates) == 2
    path.write_bytes(b"torn")  # a damaged identity is replaced by a new one, never an error
    renewed = keys.signing_identity()
    assert renewed.key_pem != first.key_pem and stat.S_IMODE(path.stat().st_mode) == 0o600
    ai_credentials(audio_formats.encode(_speechlike(), RATE, "wav", FACTS), "wav")


def test_a_saved_output_verifies_and_one_edited_byte_makes_verify_say_it_was_changed(tmp_path, capsys):
    audio = _speechlike()
    saved = write_output(tmp_path / "outputs", "0123456789ab", audio, RATE, FACTS).wav_path
    assert np.array_equal(read_samples(saved), read_samples(_file(tmp_path / "plain.wav", wav_bytes(audio, RATE))))
    assert main(["verify", str(saved)]) == 0
    said = capsys.readouterr().out
    assert "valid" in said and "AI-generated: yes" in said and "Fun-CosyVoice3-0.5B" in said and "ab" * 32 in said
    assert read_credentials(saved).trusted  # this install's own root is trusted here

    data = saved.read_bytes()
    in_audio, in_manifest = data.index(b"data") + 8 + 1000, data.index(b"C2PA") + 8 + 500
    in_box_header = data.index(b"C2PA") + 12  # the credentials can no longer be read whole
    for name, offset in (("audio.wav", in_audio), ("manifest.wav", in_manifest), ("header.wav", in_box_header)):
        edited = bytearray(data)
        edited[offset] ^= 0x01
        path = _file(tmp_path / name, bytes(edited))
        assert read_credentials(path).verdict == CHANGED, name
        assert main(["verify", str(path)]) == 1
        assert "CHANGED after signing" in capsys.readouterr().out
    assert main(["verify", str(_file(tmp_path / "torn.wav", b"RIFFxxxxWAVEjunk"))]) == 2
    assert "cannot be read" in capsys.readouterr().out


def test_the_setting_turns_the_credentials_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(setting("content_credentials").env, "0")
    audio = _speechlike()
    files = write_output(tmp_path, "0123456789ab", audio, RATE, FACTS)
    assert b"C2PA" not in _chunks(files.wav_path.read_bytes()) and files.unsigned is None
    assert read_credentials(files.wav_path).verdict == NONE
    assert main(["verify", str(files.wav_path)]) == 2 and "no content credentials" in capsys.readouterr().out
    assert audio_formats.encode(audio, RATE, "flac", FACTS) == audio_formats.encode(audio, RATE, "flac")


def test_an_organisation_certificate_signs_instead_and_a_wrong_key_loses_no_audio(tmp_path, monkeypatch):
    key_pem, chain_pem = keys._make_install_identity()  # a chain like a certification authority's
    cert, key = _file(tmp_path / "chain.pem", chain_pem), _file(tmp_path / "key.pem", key_pem)
    monkeypatch.setenv(setting("signing_cert").env, str(cert))
    monkeypatch.setenv(setting("signing_key").env, str(key))
    saved = write_output(tmp_path / "outputs", "0123456789ab", _speechlike(), RATE, FACTS)
    root = keys.split_certificates(chain_pem)[-1]
    theirs = read_credentials(saved.wav_path, anchors_pem=root)
    assert theirs.verdict == VALID and theirs.trusted and theirs.ai_generated
    assert not read_credentials(saved.wav_path).trusted  # not this install's root

    other_key, _ = keys._make_install_identity()
    _file(key, other_key)
    plain = wav_bytes(_speechlike(), RATE)
    kept, reason = with_credentials(plain, MEDIA_TYPES["wav"], FACTS, "x.wav")
    assert kept == plain and "does not belong" in reason
    unsigned = write_output(tmp_path / "outputs", "fedcba987654", _speechlike(), RATE, FACTS)
    assert unsigned.wav_path.is_file() and "without content credentials" in unsigned.unsigned


def test_a_long_jobs_file_names_what_made_its_lines(tmp_path):
    line = write_output(tmp_path / "outputs", "0123456789ab", _speechlike(), RATE, FACTS)
    files = ResultFiles()
    files.note_line({"line_output": str(line.wav_path), "model": FACTS["model"]})
    joined = files.wav(tmp_path / "dialogue.wav", _speechlike(1.0), RATE, {"kind": "dialogue", "lines": 1})[0]
    generation = ai_credentials(joined.read_bytes(), "wav")[GENERATION_LABEL]
    assert generation["long_form_kind"] == "dialogue" and generation["voice_hashes"] == ["ab" * 32]
    assert (generation["model"], generation["engine"]) == (FACTS["model"], FACTS["engine"])
    assert json.loads(joined.with_suffix(".json").read_text())["kind"] == "dialogue"


class ToneSpeak:
    """A long job's lines as a tone each (no model): what the long-form writers make of them is checked here."""

    def prepare(self, voices) -> None:
        list(voices)

    def styles(self, voice) -> tuple[str, ...]:
        return ()

    def __call__(self, line) -> Spoken:
        return Spoken(_speechlike(0.3), RATE, {})


def test_every_long_form_file_a_dub_a_batch_and_a_dialogue_s_lines_carries_the_ai_claim(tmp_path):
    cues = "1\n00:00:00,000 --> 00:00:01,000\nOne.\n\n2\n00:00:01,000 --> 00:00:02,000\nTwo.\n"
    dub = run_dub(cues, None, ToneSpeak(), tmp_path / "dub")
    talk = run_dialogue(
        "[S1] One.\n[S1] Two.\n", {"S1": "A"}, ["A"], ToneSpeak(), tmp_path / "talk", per_line_files=True
    )
    assert run_batch("One.\nTwo.\n", "txt", tmp_path / "batch", ToneSpeak()).done == 2
    batch_wavs = sorted((tmp_path / "batch").glob("*.wav"))  # (the result names the folder and its zip)
    wavs = [dub.audio_path, *(path for path in talk.files if path.suffix == ".wav"), *batch_wavs]
    kinds = [ai_credentials(path.read_bytes(), "wav")[GENERATION_LABEL].get("long_form_kind") for path in wavs]
    assert kinds == ["dub", "dialogue", None, None, "batch", "batch"]  # the joined files say their kind


def _file(path, data: bytes):
    path.write_bytes(data)
    return path
