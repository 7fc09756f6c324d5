"""The page's Gradio API through ``gradio_client``: only /synthesize and /voices are public, and
/synthesize speaks through the same queue, saving the same outputs (its sidecar says who asked)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
from gradio_client import Client

from tests.api.conftest import sidecar_for
from tests.provenance_check import ai_credentials


@pytest.fixture(scope="module")
def client(api_app):
    return Client(api_app.url, verbose=False)


def test_view_api_lists_only_the_public_endpoints(client):
    info = client.view_api(return_format="dict", print_info=False)
    assert set(info["named_endpoints"]) == {"/synthesize", "/voices"}
    assert info["unnamed_endpoints"] == {}
    parameters = [parameter["parameter_name"] for parameter in info["named_endpoints"]["/synthesize"]["parameters"]]
    assert parameters == [
        "text",
        "voice",
        "instructions",
        "prompt_text",
        "seed",
        "speed",
        "trim",
        "loudness_lufs",
        *("temperature", "top_p", "top_k", "repetition_window"),  # the sampling settings (none: the model's own)
        "style",  # last: the saved voice's recording of that style (empty: its own)
    ]


def test_internal_page_events_cannot_be_called(client):
    with pytest.raises(ValueError, match="Cannot find a function with `api_name`: /counter"):
        client.predict("en", "", api_name="/counter")
    for index in (0, 5, 12):  # nor by their position: the client knows no unnamed endpoint
        with pytest.raises(Exception):
            client.predict("en", "", fn_index=index)


def test_gradio_rest_calls_reach_only_the_public_endpoints(api_app):
    refused = httpx.post(api_app.url + "gradio_api/call/counter", json={"data": ["en", "abc"]}, timeout=30)
    assert refused.status_code == 404 and "no public endpoint 'counter'" in refused.text
    started = httpx.post(
        api_app.url + "gradio_api/call/synthesize",
        timeout=30,
        json={"data": ["Hello over REST.", "preview", "", "", -1, 1.0, False, None, None, None, None, None, ""]},
    )
    assert started.status_code == 200
    events = httpx.get(api_app.url + f"gradio_api/call/synthesize/{started.json()['event_id']}", timeout=300).text
    assert "event: complete" in events and ".wav" in events


def test_synthesize_by_name_returns_the_wav_and_its_facts(client, api_app):
    path, facts = client.predict(text="Hello from the Gradio client.", voice="preview", seed=5, api_name="/synthesize")
    samples, rate = soundfile.read(path, dtype="float32")
    assert rate == facts["sample_rate"] == 24000
    assert len(samples) / rate == pytest.approx(facts["duration_s"], abs=0.01)
    assert np.sqrt(np.mean(samples**2)) > 0.01 and facts["seed"] == 5
    saved = api_app.outputs / facts["file"]
    assert saved.is_file() and Path(path).read_bytes() == saved.read_bytes()
    assert sidecar_for(api_app, facts["job_id"])["interface"] == "gradio_api"
    assert ai_credentials(saved.read_bytes(), "wav")["org.cosyvoice-mac.generation"]["interface"] == "gradio_api"


def test_synthesize_errors_are_messages(client):
    with pytest.raises(Exception, match="no voice 'nobody'"):
        client.predict(text="Hello.", voice="nobody", api_name="/synthesize")


def test_voices_lists_the_preview_voice(client):
    voices = client.predict(api_name="/voices")
    voices = json.loads(voices) if isinstance(voices, str) else voices
    assert any(voice["id"] == "preview" and voice["preview"] for voice in voices)


def test_synthesize_refuses_a_seed_that_is_not_whole_as_v1_does(client):
    """The seed box rounded 1.5 to 2 before the request contract could refuse it."""
    with pytest.raises(Exception, match="seed 1.5 must be a whole number"):
        client.predict(text="Hello.", voice="preview", seed=1.5, api_name="/synthesize")


def test_synthesize_returns_the_audio_with_a_warning_when_outputs_refuses_it(client, api_app):
    """outputs/ unwritable (a file where the folder should be): the audio comes back all the same, as it does
    from /v1, the CLI and long form, with a warning that names no server path."""
    api_app.outputs.mkdir(exist_ok=True)
    moved = api_app.outputs.with_name("outputs-moved")
    api_app.outputs.rename(moved)
    api_app.outputs.write_text("a file where the folder should be")
    try:
        path, facts = client.predict(text="Nowhere to keep this.", voice="preview", seed=3, api_name="/synthesize")
    finally:
        api_app.outputs.unlink()
        moved.rename(api_app.outputs)
    assert facts["saved"] is False and facts["file"] is None
    assert "could not save the result in outputs/" in facts["warning"] and str(api_app.root) not in facts["warning"]
    samples, rate = soundfile.read(path, dtype="float32")
    assert rate == facts["sample_rate"] and len(samples) / rate == pytest.approx(facts["duration_s"], abs=0.01)
    assert np.sqrt(np.mean(samples**2)) > 0.01
    ai_credentials(Path(path).read_bytes(), "wav")  # unsaved, and signed all the same
