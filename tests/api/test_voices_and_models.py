"""``/v1/voices`` (created with curl's multipart upload, used by name and by id, deleted) and ``/v1/models``."""

from __future__ import annotations

import io
import json
import subprocess

import httpx
import numpy as np
import openai
import pytest
import soundfile

from tests.api.conftest import sidecar_for


def _curl_create(url: str, audio, name: str, transcript: str | None = None) -> tuple[int, dict]:
    command = ["curl", "-sS", "-w", "\n%{http_code}", url + "v1/voices", "-F", f"audio=@{audio}", "-F", f"name={name}"]
    if transcript:
        command += ["-F", f"transcript={transcript}"]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout
    body, status = output.rsplit("\n", 1)
    return int(status), json.loads(body)


def _pcm(answer) -> np.ndarray:
    return soundfile.read(io.BytesIO(answer.content), dtype="int16")[0]


def test_models_list_the_preview_as_loaded(api_app):
    models = httpx.get(api_app.url + "v1/models", timeout=30).json()
    assert models["object"] == "list"
    (preview,) = models["data"]
    assert preview["id"] == "preview" and preview["preview"] and preview["loaded"]
    assert "Preview voice" in preview["label"]


def test_voices_list_the_preview_voice_when_no_model_is_installed(api_app):
    voices = httpx.get(api_app.url + "v1/voices", timeout=30).json()["data"]
    preview = next(voice for voice in voices if voice["id"] == "preview")
    assert preview["preview"] is True and "Preview voice" in preview["label"]


def test_a_voice_made_with_curl_speaks_and_is_deleted(api_app, make_speech):
    recording = make_speech("This is the voice I would like you to copy, please.", seconds=4.0)
    status, created = _curl_create(api_app.url, recording, "Ada Lovelace", "This is the voice I would like")
    assert status == 201, created
    assert created["name"] == "Ada Lovelace" and created["id"].startswith("voice_")
    listed = httpx.get(api_app.url + "v1/voices", timeout=30).json()["data"]
    assert any(voice["id"] == created["id"] and voice["transcript"] for voice in listed)

    client = openai.OpenAI(base_url=api_app.url + "v1", api_key="x", max_retries=0, timeout=300)
    by_name = client.audio.speech.create(
        model="tts-1", voice="Ada Lovelace", input="Good morning.", response_format="wav", extra_body={"seed": 3}
    )
    by_id = client.audio.speech.create(
        model="tts-1", voice={"id": created["id"]}, input="Good morning.", response_format="wav", extra_body={"seed": 3}
    )
    stock = client.audio.speech.create(
        model="tts-1", voice="preview", input="Good morning.", response_format="wav", extra_body={"seed": 3}
    )
    samples, rate = soundfile.read(io.BytesIO(by_name.content), dtype="float32")
    assert rate == 24000 and np.sqrt(np.mean(samples**2)) > 0.01
    assert np.array_equal(_pcm(by_name), _pcm(by_id))  # same voice, same seed: same samples (the files' INFO differ)
    assert not np.array_equal(_pcm(by_name), _pcm(stock))  # moved toward the recording, not the stock voice
    sidecar = sidecar_for(api_app, by_name.response.headers["x-cosyvoice-job-id"])
    assert sidecar["voice"] == "Ada Lovelace" and sidecar["interface"] == "api"

    status_again, taken = _curl_create(api_app.url, recording, "Ada Lovelace")
    assert status_again == 409 and taken["error"]["code"] == "voice_exists"

    deleted = httpx.delete(api_app.url + f"v1/voices/{created['id']}", timeout=30)
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert httpx.delete(api_app.url + f"v1/voices/{created['id']}", timeout=30).status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="tts-1", voice="Ada Lovelace", input="Good morning.")


def test_a_voice_upload_that_is_not_audio_or_too_large_is_refused(api_app, tmp_path):
    text_file = tmp_path / "notes.wav"
    text_file.write_text("not audio at all\n" * 100)
    status, body = _curl_create(api_app.url, text_file, "Broken")
    assert status == 400 and body["error"]["param"] == "audio" and "not an audio file" in body["error"]["message"]
    big = tmp_path / "big.wav"
    soundfile.write(big, np.zeros(24000 * 240, dtype=np.float32), 24000, subtype="FLOAT")  # 23 MB
    status, body = _curl_create(api_app.url, big, "Huge")
    assert status == 413 and body["error"]["code"] == "too_large"
    names = [voice["name"] for voice in httpx.get(api_app.url + "v1/voices", timeout=30).json()["data"]]
    assert "Broken" not in names and "Huge" not in names


def test_voice_creation_never_takes_a_server_path(api_app):
    answer = httpx.post(api_app.url + "v1/voices", data={"name": "Sneaky", "audio": "/etc/hostname"}, timeout=30)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "audio"
