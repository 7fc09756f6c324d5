"""``POST /v1/audio/speech`` through the official ``openai`` package: every format decodes to speech, the
stream starts before the job ends, and bad requests get OpenAI's error shape with the right status."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile

from tests.api.conftest import LONG_TEXT, sidecar_for
from tests.provenance_check import MEDIA_TYPES, ai_credentials

SAMPLE_RATE = 24000
TEXT = "Hello from the speech API. It speaks the way the page does."


@pytest.fixture(scope="module")
def client(api_app):
    return openai.OpenAI(base_url=api_app.url + "v1", api_key="unused-on-loopback", max_retries=0, timeout=300)


def _decode(data: bytes, response_format: str) -> tuple[np.ndarray, int]:
    if response_format == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, SAMPLE_RATE
    if response_format in ("mp3", "opus"):  # decoded by FFmpeg's decoders (PyAV), not the encoder's library
        import av

        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
            return np.concatenate(frames).astype(np.float32), stream.rate
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return samples, rate


@pytest.mark.parametrize("response_format", ["wav", "flac", "mp3", "opus", "pcm"])
def test_each_format_decodes_to_speech_of_the_right_length(client, api_app, response_format):
    response = client.audio.speech.create(model="tts-1", voice="preview", input=TEXT, response_format=response_format)
    samples, rate = _decode(response.content, response_format)
    expected_s = float(response.response.headers["x-cosyvoice-duration"])
    assert rate in (SAMPLE_RATE, 48000)  # Opus decoders always give 48 kHz
    assert expected_s > 1.5  # two sentences of speech
    assert len(samples) / rate == pytest.approx(expected_s, abs=0.1)
    loud = np.sqrt(np.mean(np.square(samples)))
    assert loud > 0.01, f"{response_format}: silent ({loud})"
    sidecar = sidecar_for(api_app, response.response.headers["x-cosyvoice-job-id"])
    assert sidecar["interface"] == "api" and sidecar["text"] == TEXT
    if response_format in MEDIA_TYPES:  # content credentials: a valid signature and the AI-generated claim
        made = ai_credentials(response.content, response_format)["org.cosyvoice-mac.generation"]
        assert made["model"] == sidecar["model"] and made["engine"] == sidecar["engine"] and made["interface"] == "api"


def test_a_wav_answer_is_the_saved_file_byte_for_byte(client, api_app):
    response = client.audio.speech.create(model="tts-1", voice="preview", input=TEXT, response_format="wav")
    saved = api_app.outputs / response.response.headers["x-cosyvoice-file"]
    assert response.content == saved.read_bytes()  # not decoded and encoded again: its INFO chunk is kept too


def test_the_same_seed_gives_the_same_audio_and_speed_changes_the_length(client):
    def speak(**extra):
        return client.audio.speech.create(
            model="tts-1", voice="preview", input=TEXT, response_format="pcm", **extra
        ).content

    first, again = speak(extra_body={"seed": 7}), speak(extra_body={"seed": 7})
    fast = speak(extra_body={"seed": 7}, speed=1.5)
    assert first == again
    assert len(fast) / len(first) == pytest.approx(1 / 1.5, rel=0.15)


def test_streamed_audio_arrives_before_the_job_ends(client, api_app):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="preview", input=LONG_TEXT, response_format="wav", extra_body={"stream": True}
    ) as response:
        job_id = response.headers["x-cosyvoice-job-id"]
        chunks = response.iter_bytes()
        first = next(chunks)
        finished_when_first_arrived = sidecar_for(api_app, job_id) is not None
        data = first + b"".join(chunks)
    assert not finished_when_first_arrived, "the first bytes came only after the job had saved its output"
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE and len(samples) / rate > 5.0
    assert np.sqrt(np.mean(np.square(samples))) > 0.01
    deadline = time.monotonic() + 30
    while sidecar_for(api_app, job_id) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    sidecar = sidecar_for(api_app, job_id)
    assert sidecar["duration_s"] == pytest.approx(len(samples) / rate, abs=0.05)
    ai_credentials((api_app.outputs / sidecar["file"]).read_bytes(), "wav")  # what is saved of a stream is signed


def test_sse_stream_sends_base64_deltas_then_done(api_app):
    body = {"model": "tts-1", "voice": "preview", "input": LONG_TEXT, "response_format": "pcm", "stream_format": "sse"}
    events = []
    with httpx.stream("POST", api_app.url + "v1/audio/speech", json=body, timeout=300) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) > 2
    pcm = b"".join(base64.b64decode(event["audio"]) for event in events[:-1])
    assert len(pcm) / 2 / SAMPLE_RATE > 5.0
    assert events[-1]["usage"]["input_tokens"] == len(LONG_TEXT)


def _error_of(call) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def test_unknown_voice_is_a_404_naming_the_voices(client):
    error = _error_of(lambda: client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT))
    assert error.status_code == 404
    assert error.body["code"] == "voice_not_found" and error.body["param"] == "voice"
    assert "alloy" in error.body["message"] and "preview" in error.body["message"]


def test_unknown_model_is_a_404(client):
    error = _error_of(lambda: client.audio.speech.create(model="whisper-9", voice="preview", input=TEXT))
    assert error.status_code == 404 and error.body["code"] == "model_not_found"


def test_unsupported_format_is_a_400_listing_the_supported_ones(client):
    error = _error_of(
        lambda: client.audio.speech.create(model="tts-1", voice="preview", input=TEXT, response_format="aac")
    )
    assert error.status_code == 400 and error.body["param"] == "response_format"
    for name in ("wav", "flac", "mp3", "opus", "pcm"):
        assert name in error.body["message"]


def test_too_long_a_text_is_a_400_naming_the_check(client):
    error = _error_of(lambda: client.audio.speech.create(model="tts-1", voice="preview", input="word " * 1200))
    assert error.status_code == 400
    assert error.body["code"] == "text_too_long" and error.body["param"] == "input"
    assert "5,000" in error.body["message"]


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "tts-1", "voice": "preview", "input": "Hi", "prompt_audio": "/etc/passwd"}, 400, "prompt_audio"),
        ({"model": "tts-1", "voice": "/etc/passwd", "input": "Hi"}, 404, "voice"),
        ({"model": "tts-1", "voice": "preview", "input": "Hi", "speed": 9}, 400, "speed"),
        (
            {
                "model": "tts-1",
                "voice": "preview",
                "input": "Hi",
                "speed": 1.5,
                "stream": True,
                "response_format": "pcm",
            },
            400,
            "speed",
        ),
        ({"model": "tts-1", "voice": "preview", "input": "Hi", "stream": True}, 400, "response_format"),
        ({"model": "tts-1", "voice": "preview", "input": "   "}, 400, "input"),
        ({"model": "tts-1", "voice": "preview"}, 400, "input"),
    ],
)
def test_bad_bodies_get_the_openai_error_shape(api_app, body, status, param):
    answer = httpx.post(api_app.url + "v1/audio/speech", json=body, timeout=60)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    assert "Traceback" not in answer.text


def test_a_body_over_the_limit_is_a_413(api_app):
    answer = httpx.post(
        api_app.url + "v1/audio/speech",
        content=b"{" + b" " * (2 << 20) + b"}",
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"


def test_curl_gets_a_wav(api_app, tmp_path):
    target = tmp_path / "speech.wav"
    subprocess.run(
        [
            "curl",
            "-sS",
            "--fail",
            api_app.url + "v1/audio/speech",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps({"model": "tts-1", "input": TEXT, "voice": "preview", "response_format": "wav"}),
            "-o",
            str(target),
        ],
        check=True,
        timeout=300,
    )
    info = soundfile.info(target)
    assert info.samplerate == SAMPLE_RATE and info.duration > 1.5
