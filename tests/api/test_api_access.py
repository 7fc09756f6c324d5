"""Who may use /v1: open on loopback; bound beyond this computer, only with the key, and off without one."""

from __future__ import annotations

import httpx
import openai
import pytest

from cosyvoice_mac.api.auth import ApiAccess, is_loopback
from tests.api.conftest import wait_until_ready
from tests.browser.conftest import start_app, stop_app

KEY = "test-key-4c1d"


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.168.1.20", False),
        ("my-mac.local", False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback
    assert ApiAccess.from_settings(host, None).key_required is (not loopback)


def test_the_key_comes_from_the_environment_too(monkeypatch):
    monkeypatch.setenv("COSYVOICE_API_KEY", " from-env ")
    assert ApiAccess.from_settings("0.0.0.0", None).api_key == "from-env"
    assert ApiAccess.from_settings("0.0.0.0", "flag").api_key == "flag"


def test_bound_beyond_loopback_without_a_key_the_api_is_off_and_the_page_says_so(tmp_path):
    app = start_app(tmp_path, tmp_path / "models", ("--model", "preview", "--host", "0.0.0.0"))
    try:
        answer = httpx.get(app.url + "v1/models", timeout=30)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "api_key_not_configured"
        assert "--api-key" in answer.json()["error"]["message"]
        speech = httpx.post(
            app.url + "v1/audio/speech",
            json={"model": "tts-1", "voice": "preview", "input": "Hi"},
            headers={"Authorization": "Bearer guessed"},
            timeout=30,
        )
        assert speech.status_code == 403
        config = httpx.get(app.url + "config", timeout=30).text
        assert "the `/v1` API is off" in config
    finally:
        stop_app(app)
    assert app.process.returncode == 0  # Ctrl-C closes the server, the worker and the temporary folder
    assert "API: " in app.log.read_text() and "is OFF" in app.log.read_text()


def test_bound_beyond_loopback_with_a_key_only_key_holders_are_served(tmp_path):
    app = start_app(tmp_path, tmp_path / "models", ("--model", "preview", "--host", "0.0.0.0", "--api-key", KEY))
    url = app.url
    try:
        assert httpx.get(url + "v1/models", timeout=30).status_code == 401
        wrong = httpx.get(url + "v1/models", headers={"Authorization": "Bearer nope"}, timeout=30)
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        wait_until_ready(app, headers={"Authorization": f"Bearer {KEY}"})
        client = openai.OpenAI(base_url=url + "v1", api_key=KEY, max_retries=0, timeout=300)
        speech = client.audio.speech.create(
            model="tts-1", voice="preview", input="Only for key holders.", response_format="wav"
        )
        assert speech.content[:4] == b"RIFF" and len(speech.content) > 24000
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "v1", api_key="wrong", max_retries=0).models.list()
        assert "Authorization: Bearer" in httpx.get(url + "config", timeout=30).text
    finally:
        stop_app(app)
