"""``POST /v1/audio/voice-conversion`` on the real app (preview voice): curl and raw httpx multipart, the
sidecar's facts, streaming, and OpenAI-shaped errors for every bad field."""

from __future__ import annotations

import subprocess

import httpx
import numpy as np
import pytest
import soundfile

from tests.api.conftest import sidecar_for
from tests.provenance_check import ai_credentials

URL = "v1/audio/voice-conversion"


@pytest.fixture(scope="module")
def source(make_speech):
    return make_speech("The birch canoe slid on the smooth planks.")


@pytest.fixture(scope="module")
def prompt(make_speech):
    return make_speech("This is the voice I would like you to copy, please.", seconds=4.0)


def test_curl_converts_a_recording_into_the_preview_voice(api_app, source, tmp_path):
    target = tmp_path / "converted.wav"
    headers = tmp_path / "headers.txt"
    subprocess.run(
        [
            "curl",
            "-sS",
            "--fail",
            api_app.url + URL,
            "-F",
            f"audio=@{source}",
            "-F",
            "voice=preview",
            "-F",
            "response_format=wav",
            "-D",
            str(headers),
            "-o",
            str(target),
        ],
        check=True,
        timeout=300,
    )
    info, seconds = soundfile.info(target), soundfile.info(source).duration
    assert info.samplerate == 24000 and abs(info.duration - seconds) < 0.05
    job_id = next(
        line.split(":", 1)[1].strip()
        for line in headers.read_text().splitlines()
        if line.lower().startswith("x-cosyvoice-job-id")
    )
    sidecar = sidecar_for(api_app, job_id)
    assert sidecar["mode"] == "voice_conversion" and sidecar["interface"] == "api"
    assert sidecar["source"] == source.name  # the file sent, not the server's name for its copy (upload.wav)
    assert len(sidecar["source_hash"]) == 64 and sidecar["source_duration_s"] == pytest.approx(seconds, abs=0.01)
    made = ai_credentials(target.read_bytes(), "wav")["org.cosyvoice-mac.generation"]
    assert made["mode"] == "voice_conversion" and made["converted_recording_hash"] == sidecar["source_hash"]


def test_raw_httpx_multipart_with_a_prompt_recording_streams_pcm(api_app, source, prompt):
    files = {
        "audio": ("source.wav", source.read_bytes(), "audio/wav"),
        "prompt_audio": ("prompt.wav", prompt.read_bytes(), "audio/wav"),
    }
    data = {"response_format": "pcm", "stream": "true"}
    with httpx.stream("POST", api_app.url + URL, files=files, data=data, timeout=300) as answer:
        assert answer.status_code == 200, answer.read()
        body = b"".join(answer.iter_bytes())
    samples = np.frombuffer(body, dtype="<i2")
    assert abs(samples.size / 24000 - soundfile.info(source).duration) < 0.05 and np.abs(samples).max() > 0


def _error(api_app, files, data, status):
    answer = httpx.post(api_app.url + URL, files=files, data=data, timeout=300)
    assert answer.status_code == status, answer.text
    return answer.json()["error"]


def test_bad_fields_get_openai_shaped_errors(api_app, source, prompt, tmp_path):
    audio = {"audio": ("source.wav", source.read_bytes(), "audio/wav")}
    assert _error(api_app, {}, {"voice": "preview"}, 400)["param"] == "audio"
    both = {**audio, "prompt_audio": ("p.wav", prompt.read_bytes(), "audio/wav")}
    assert _error(api_app, both, {"voice": "preview"}, 400)["code"] == "voice_ambiguous"
    assert _error(api_app, audio, {}, 400)["param"] == "voice"
    assert _error(api_app, audio, {"voice": "Nobody"}, 404)["code"] == "voice_not_found"
    assert _error(api_app, audio, {"voice": "preview", "speed": "9"}, 400)["param"] == "speed"
    assert _error(api_app, audio, {"voice": "preview", "response_format": "aiff"}, 400)["param"] == "response_format"
    streamed_post = {"voice": "preview", "stream": "true", "response_format": "pcm", "trim": "true"}
    assert _error(api_app, audio, streamed_post, 400)["code"] == "post_stream"
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(32000, np.float32), 16000)
    error = _error(api_app, {"audio": ("silent.wav", silent.read_bytes(), "audio/wav")}, {"voice": "preview"}, 400)
    assert (error["code"], error["param"]) == ("audio_silent", "audio") and "silent" in error["message"]
    noise = tmp_path / "noise.wav"
    soundfile.write(noise, 0.3 * np.random.default_rng(3).standard_normal(48000).astype(np.float32), 16000)
    error = _error(api_app, {"audio": ("noise.wav", noise.read_bytes(), "audio/wav")}, {"voice": "preview"}, 400)
    assert "no speech to convert" in error["message"] and "noise.wav" in error["message"]
    assert error["param"] == "audio"  # the worker's refusal names the field it is about (it said null)
    named = {"audio": ("Interview 3 (take 2).WAV", silent.read_bytes(), "audio/wav")}  # the name the user knows
    assert "Interview 3 (take 2).wav is silent" in _error(api_app, named, {"voice": "preview"}, 400)["message"]
    huge = {"audio": ("huge.wav", b"\0" * (21 << 20), "audio/wav")}
    assert _error(api_app, huge, {"voice": "preview"}, 413)["code"] == "too_large"
