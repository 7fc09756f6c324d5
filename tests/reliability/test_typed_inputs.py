"""Wrongly typed or missing inputs to the public Gradio API, from outside (Gradio's REST route with httpx, and
gradio_client): the answer names the field and the type it takes, never a Python exception's words or a
component's repr with its memory address."""

from __future__ import annotations

import re

import httpx
import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from tests.reliability.server import JOB_S, POST_OFF

RAW = re.compile(r"Traceback|\b\w+Error\b|__round__|0x[0-9a-f]{6,}|<gradio\.|object at")
GOOD = ["Hello.", "preview", "", "", 1, 1.0, False, None]
INPUTS = "text, voice, instructions, prompt_text, seed, speed, trim, loudness_lufs"


def _call(app, data: list) -> str:
    """What Gradio's REST route answers for ``/synthesize`` with ``data``: the event stream's text."""
    with httpx.Client(base_url=app.url.rstrip("/"), trust_env=False, timeout=JOB_S) as http:
        started = http.post("/gradio_api/call/synthesize", json={"data": data})
        assert started.status_code == 200, started.text
        return http.get(f"/gradio_api/call/synthesize/{started.json()['event_id']}").text


def _with(index: int, value) -> list:
    data = list(GOOD)
    data[index] = value
    return data


@pytest.mark.parametrize(
    "data, words",
    [
        (_with(4, "abc"), "synthesize: seed must be a whole number, got the text 'abc'"),
        (_with(4, [1]), "seed must be a whole number, got a list of 1"),
        (_with(5, "fast"), "synthesize: speed must be a number, got the text 'fast'"),
        (_with(5, {"x": 1}), "speed must be a number, got an object"),
        (_with(6, "yes"), "synthesize: trim must be true or false, got the text 'yes'"),
        (_with(7, "loud"), "synthesize: loudness_lufs must be a number, got the text 'loud'"),
        (["Hi."], f"synthesize needs 8 inputs ({INPUTS}), got 1"),
        ([], f"synthesize needs 8 inputs ({INPUTS}), got 0"),
        ([*GOOD, 1, 2, 3], f"synthesize needs 8 inputs ({INPUTS}), got 11"),
        (_with(0, ["a"]), "synthesize: text must be text, got a list of 1"),
        (_with(0, 123), "synthesize: text must be text, got the number 123"),
        (_with(2, 123), "synthesize: instructions must be text, got the number 123"),
        (_with(3, ["a"]), "synthesize: prompt_text must be text, got a list of 1"),
    ],
    ids=[
        "seed_text",
        "seed_list",
        "speed_text",
        "speed_object",
        "trim_text",
        "loudness_text",
        "one_input",
        "none",
        "eleven_inputs",
        "text_list",
        "text_number",
        "instructions_number",
        "prompt_text_list",
    ],
)
def test_a_wrongly_typed_input_is_named_with_its_type(app, data, words):
    stream = _call(app, data)
    assert "event: error" in stream and words in stream, stream
    assert not RAW.search(stream), stream


def test_gradio_client_hears_the_field_and_its_type(app, client):
    with pytest.raises(AppError) as refusal:
        client.predict(text="Hi.", voice="preview", seed="abc", api_name="/synthesize")
    assert "seed must be a whole number" in str(refusal.value) and not RAW.search(str(refusal.value))
    with pytest.raises(AppError, match="speed must be a number, got the text 'fast'"):
        client.predict(text="Hi.", voice="preview", speed="fast", api_name="/synthesize")


def test_a_number_spelled_as_text_still_works_where_gradio_took_it(app):
    stream = _call(app, _with(5, "1.0"))
    assert "event: complete" in stream, stream


@pytest.mark.parametrize(
    "seed, speed, words",
    [("abc", 1.0, "Seed must be a whole number, got the text 'abc'"), (1, "fast", "Speed must be a number")],
    ids=["seed_text", "speed_text"],
)
def test_the_page_s_own_events_name_the_field_too(app, client, speech, seed, speed, words):
    with pytest.raises(AppError) as refusal:
        app.call(
            client, "/generate", "en", handle_file(speech), "", "", "Hello.", "cross_lingual", "", seed, speed, False,
            *POST_OFF, True,
        )  # fmt: skip
    assert words in str(refusal.value) and not RAW.search(str(refusal.value)), refusal.value


@pytest.mark.parametrize("field, value", [("trim", "yes"), ("stream", "yes"), ("trim", 1)])
def test_v1_takes_only_json_s_true_or_false_for_a_switch(app, field, value):
    body = {"model": "tts-1", "voice": "preview", "input": "Hello.", "response_format": "wav", field: value}
    answer = httpx.post(app.url + "v1/audio/speech", json=body, timeout=JOB_S, trust_env=False)
    assert answer.status_code == 400, answer.headers  # before: "yes" and 1 were taken as true
    error = answer.json()["error"]
    assert error["param"] == field and not RAW.search(error["message"]), error


@pytest.mark.parametrize("method, path", [("GET", "/v1/nothing"), ("GET", "/v1/longform/files/..%2f..%2fetc%2fpasswd")])
def test_a_v1_path_no_route_takes_is_answered_in_openai_s_shape(app, method, path):
    answer = httpx.request(method, app.url.rstrip("/") + path, timeout=JOB_S, trust_env=False)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found", answer.text  # before: Gradio's {"detail": "Not Found"}
