"""Voice conversion through ``/v1`` and the CLI on the real app with the tiny random CosyVoice3 (the browser tests'
app: no browser here), streamed and whole: the audio that comes out is the conversion the model makes (the same
conversion run in this process on the same folder), and the streamed one sounds like the whole one, chunk by
chunk, so a silenced or scaled stream fails here, not only a short one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.pipeline import CosyVoice
from tests.browser.conftest import MODEL_NAME, REPO_ROOT
from tests.streamed_audio import assert_streams_like, rms

URL = "v1/audio/voice-conversion"
QUANTUM = 2e-3  # 16-bit output, and the app's one torch thread against two here: the same audio within this
DOOR_S = 300


@pytest.fixture(scope="module")
def source(make_speech):
    return make_speech("Glue the sheet to the dark blue background.")


@pytest.fixture(scope="module")
def reference(app, source, prompt_wav):
    """The conversion made here on the app's own model folder: (whole audio, streamed chunks)."""
    model = CosyVoice.from_pretrained(app.root / "models" / MODEL_NAME, device="cpu")
    whole = np.concatenate([r.audio for r in model.convert(str(source), str(prompt_wav))])
    chunks = [r.audio for r in model.convert(str(source), str(prompt_wav), stream=True)]
    assert rms(whole) > 1e-2  # random weights, but a real wave
    return whole, chunks


def _split_like(audio: np.ndarray, chunks: list[np.ndarray]) -> list[np.ndarray]:
    return np.split(audio, np.cumsum([len(chunk) for chunk in chunks])[:-1])


def _post(app, source, prompt_wav, **form) -> httpx.Response:
    files = {
        "audio": (source.name, source.read_bytes(), "audio/wav"),
        "prompt_audio": ("prompt.wav", prompt_wav.read_bytes(), "audio/wav"),
    }
    deadline = time.monotonic() + DOOR_S
    while True:  # as the 503 says: the model may still be loading when this module runs first on a fresh app
        answer = httpx.post(app.url + URL, files=files, data=form, timeout=DOOR_S)
        loading = answer.status_code == 503 and answer.json()["error"]["code"] == "model_loading"
        if not loading or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert answer.status_code == 200, answer.text
    return answer


def test_v1_streams_the_conversion_of_the_model_chunk_by_chunk(app, source, prompt_wav, reference):
    whole, chunks = reference
    answer = _post(app, source, prompt_wav, response_format="pcm", stream="true")
    streamed = np.frombuffer(answer.content, dtype="<i2").astype(np.float32) / 32768
    assert len(streamed) == len(whole)
    assert float(np.abs(streamed - np.concatenate(chunks)).max()) < QUANTUM  # the model's own stream
    assert_streams_like(_split_like(streamed, chunks), whole)  # which sounds like the whole conversion


def test_v1_answers_the_whole_conversion_of_the_model(app, source, prompt_wav, reference, tmp_path):
    whole, _ = reference
    path = tmp_path / "whole.wav"
    path.write_bytes(_post(app, source, prompt_wav, response_format="wav").content)
    audio, rate = soundfile.read(path, dtype="float32")
    assert rate == 24000 and len(audio) == len(whole)
    assert float(np.abs(audio - whole).max()) < QUANTUM


def test_the_cli_streams_the_conversion_of_the_model(app, source, prompt_wav, reference, tmp_path):
    whole, chunks = reference
    out = tmp_path / "streamed.wav"
    env = {k: v for k, v in os.environ.items() if k not in ("COSYVOICE_API_KEY", "COSYVOICE_SERVER")}
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, "-m", "cosyvoice_mac", "convert", str(source), "--prompt-wav", str(prompt_wav)]
    command += ["--stream", "--out", str(out), "--server", app.url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DOOR_S, cwd=REPO_ROOT, env=env)
    assert done.returncode == 0, done.stderr
    audio, rate = soundfile.read(out, dtype="float32")
    assert rate == 24000 and len(audio) == len(whole)
    assert float(np.abs(audio - np.concatenate(chunks)).max()) < QUANTUM
    assert_streams_like(_split_like(audio, chunks), whole)
