"""Inline markup and sampling settings through the app's doors (the session's preview-voice app): ``/v1`` and the
Gradio API speak the tags and record the sampling settings; a malformed tag comes back with its position and a
suggestion, and a sampling setting out of range naming it; ``synth`` through the app says the same."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest
from gradio_client import Client

from tests.api.conftest import sidecar_for
from tests.browser.conftest import REPO_ROOT

RATE = 24000


def _speech(app, **body) -> httpx.Response:
    body = {"model": "tts-1", "voice": "preview", "response_format": "pcm", "seed": 1, **body}
    return httpx.post(app.url + "v1/audio/speech", json=body, timeout=300)


def test_v1_speaks_a_pause_and_records_the_sampling_asked(api_app):
    answer = _speech(api_app, input="One. [pause 600ms] Two.", top_k=30, temperature=0.9)
    assert answer.status_code == 200, answer.text
    audio = np.frombuffer(answer.content, dtype="<i2")
    silent = np.flatnonzero(np.diff(np.concatenate(([0], (np.abs(audio) < 33).astype(np.int8), [0]))))
    assert (silent[1::2] - silent[::2]).max() >= 0.6 * RATE  # the pause is in the audio
    sidecar = sidecar_for(api_app, answer.headers["x-cosyvoice-job-id"])
    assert sidecar["text"] == "One. [pause 600ms] Two."
    assert sidecar["sampling"] == {"temperature": 0.9, "top_p": None, "top_k": 30, "repetition_window": None}
    assert any("sampling settings were recorded only" in note for note in sidecar["notes"])


@pytest.mark.parametrize("stream", [False, True])
def test_v1_refuses_a_malformed_tag_with_its_position_and_a_suggestion(api_app, stream):
    answer = _speech(api_app, input="Hi [pase 500ms] there.", stream=stream)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("input", "markup_invalid")  # the door's, not the worker's refusal
    assert "at character 4" in error["message"] and "did you mean [pause 500ms]" in error["message"]


@pytest.mark.parametrize(("field", "value"), [("top_k", 0), ("temperature", 3.0), ("repetition_window", 2.5)])
def test_v1_refuses_a_sampling_setting_out_of_range_naming_it(api_app, field, value):
    answer = _speech(api_app, input="Hello.", **{field: value})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == field, answer.text


@pytest.fixture(scope="module")
def client(api_app):
    return Client(api_app.url, verbose=False)


def test_the_gradio_api_refuses_a_malformed_tag_and_a_setting_out_of_range(client):
    with pytest.raises(Exception, match=r"\(hapy\) is not a style \(at character 4\)") as refused:
        client.predict(text="Hi (hapy) there.", voice="preview", api_name="/synthesize")
    assert "the model refused" not in str(refused.value)  # refused where it entered, never queued
    with pytest.raises(Exception, match="top_p"):
        client.predict(text="Hello.", voice="preview", top_p=5, api_name="/synthesize")


def test_the_gradio_api_records_its_sampling_settings(client, api_app):
    _, facts = client.predict(text="Yes. [pause 200ms] No.", voice="preview", seed=2, top_p=0.5, api_name="/synthesize")
    assert sidecar_for(api_app, facts["job_id"])["sampling"]["top_p"] == 0.5


def test_synth_through_the_app_says_where_the_tag_is(api_app, tmp_path):
    command = [sys.executable, "-m", "cosyvoice_mac", "synth", "--server", api_app.url, "--voice", "preview"]
    command += ["--text", "Hi [speed fast] there.", "--out", str(tmp_path / "x.wav")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode != 0 and not (tmp_path / "x.wav").exists()
    assert "[speed fast] needs a number (at character 4)" in done.stderr, done.stderr
