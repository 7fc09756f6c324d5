"""Post-processing over the APIs: ``trim`` and ``loudness_lufs`` in ``/v1/audio/speech`` (the openai client's
``extra_body``) and in the Gradio ``/synthesize``; off by default, recorded in the sidecar, bad values a 400
naming the field (issue 21)."""

from __future__ import annotations

import io

import httpx
import numpy as np
import openai
import pytest
import soundfile
from gradio_client import Client

from cosyvoice_mac.sound.post import TRIM_KEEP_S, loudness
from tests.api.conftest import sidecar_for

TEXT = "Every output may be trimmed and normalised, when it is asked for."
TRIMMED_EDGE_S = TRIM_KEEP_S + 0.03  # frames of 512 samples at 24 kHz, measured per sample (see test_post_every_output)


@pytest.fixture(scope="module")
def client(api_app):
    return openai.OpenAI(base_url=api_app.url + "v1", api_key="unused-on-loopback", max_retries=0, timeout=300)


def _speak(client, **extra):
    """(samples, sample rate, job id) of one WAV answer."""
    answer = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="preview", input=TEXT, response_format="wav", extra_body={"seed": 9, **extra}
    )
    samples, rate = soundfile.read(io.BytesIO(answer.content), dtype="float32")
    return samples, rate, answer.headers["x-cosyvoice-job-id"]


def _edges_s(wave: np.ndarray, rate: int) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(wave) > np.max(np.abs(wave)) * 0.01)  # -40 dB of the peak
    return loud[0] / rate, (wave.size - 1 - loud[-1]) / rate


def test_speech_with_trim_and_loudness_lands_on_target_and_the_sidecar_records_it(client, api_app):
    plain, rate, plain_job = _speak(client)
    explicit_off, _, _ = _speak(client, trim=False, loudness_lufs=None)
    made, _, job = _speak(client, trim=True, loudness_lufs=-30)  # the preview speaks at about -25, peaks at -0.5
    assert np.array_equal(plain, explicit_off)  # off is off, however it is said
    assert sidecar_for(api_app, plain_job)["post"] == {"trim": False, "loudness_lufs": None, "notes": []}
    post = sidecar_for(api_app, job)["post"]
    assert abs(loudness(made, rate) + 30) < 0.5 and post["target_lufs"] == -30 and not post["peak_limited"]
    lead, tail = _edges_s(made, rate)
    assert lead <= TRIMMED_EDGE_S and tail <= TRIMMED_EDGE_S
    cut = round((post["trimmed_start_ms"] + post["trimmed_end_ms"]) * rate / 1000)
    assert abs(plain.size - made.size - cut) <= 1  # the same seed: the same speech, its silent edges cut
    assert post["measured_lufs"] == pytest.approx(loudness(plain, rate), abs=0.3)


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"loudness_lufs": 0}, "loudness_lufs", "-40 to -5 LUFS"),
        ({"loudness_lufs": -60}, "loudness_lufs", "-40 to -5 LUFS"),
        ({"loudness_lufs": "loud"}, "loudness_lufs", "loudness_lufs"),
        ({"trim": "sometimes"}, "trim", "trim"),
        ({"trim": True, "stream": True}, "trim", "a stream cannot have them"),
        ({"loudness_lufs": -16, "stream_format": "sse", "response_format": "pcm"}, "loudness_lufs", "stream"),
    ],
)
def test_bad_post_values_are_a_400_naming_the_field(api_app, extra, param, words):
    body = {"model": "tts-1", "voice": "preview", "input": "Hi.", "response_format": "wav", **extra}
    before = set(api_app.outputs.glob("*.wav")) if api_app.outputs.is_dir() else set()
    answer = httpx.post(api_app.url + "v1/audio/speech", json=body, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == param and words in error["message"], error
    assert (set(api_app.outputs.glob("*.wav")) if api_app.outputs.is_dir() else set()) == before


def test_gradio_synthesize_takes_trim_and_loudness(api_app):
    gradio = Client(api_app.url, verbose=False)
    path, facts = gradio.predict(
        text=TEXT, voice="preview", seed=3, trim=True, loudness_lufs=-32, api_name="/synthesize"
    )
    samples, rate = soundfile.read(path, dtype="float32")
    assert abs(loudness(samples, rate) + 32) < 0.5
    assert facts["post"]["target_lufs"] == -32 and facts["post"]["trimmed_start_ms"] >= 0
    assert sidecar_for(api_app, facts["job_id"])["post"] == facts["post"]
    _, plain = gradio.predict(text=TEXT, voice="preview", seed=3, api_name="/synthesize")
    assert plain["post"] == {"trim": False, "loudness_lufs": None, "notes": []}
    with pytest.raises(Exception, match="loudness target must be -40 to -5 LUFS"):
        gradio.predict(text="Hi.", voice="preview", loudness_lufs=2, api_name="/synthesize")


def test_long_form_refuses_a_bad_target_with_the_same_rule_and_field(api_app):
    answer = httpx.post(
        api_app.url + "v1/longform/batch",
        files={"file": ("lines.txt", b"One line.\nAnother line.\n", "text/plain")},
        data={"name": "post-refused", "loudness_lufs": "0"},
        timeout=60,
    )
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "loudness_lufs" and error["code"] == "loudness_invalid"
    assert "-40 to -5 LUFS (got 0)" in error["message"]
    assert not (api_app.outputs / "longform" / "batches" / "post-refused").exists()
