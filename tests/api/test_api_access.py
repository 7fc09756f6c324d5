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


def test_bound_beyond_loopback_without_a_key_the_server_refuses_to_start_unless_told_no_auth(monkeypatch, capsys):
    from cosyvoice_mac.app import parse_args

    monkeypatch.delenv("COSYVOICE_API_KEY", raising=False)
    with pytest.raises(SystemExit) as refused:
        parse_args(["--host", "0.0.0.0"])
    assert refused.value.code == 2
    message = capsys.readouterr().err
    assert "--api-key" in message and "--no-auth" in message
    with pytest.raises(SystemExit):
        parse_args(["--host", "0.0.0.0", "--no-auth", "--api-key", KEY])  # both: which one was meant?
    assert parse_args(["--host", "0.0.0.0", "--no-auth"]).no_auth
    assert not parse_args([]).no_auth  # this computer only: no key needed, as ever
    # Built by other code without a key: /v1 stays off; with --no-auth every door is open, on purpose.
    assert ApiAccess.from_settings("0.0.0.0", None).refuses_all
    opened = ApiAccess.from_settings("0.0.0.0", None, no_auth=True)
    assert opened.open_to_everyone and not opened.key_required and not opened.refuses_all
    assert ApiAccess.from_settings("0.0.0.0", KEY).locks_every_door
    assert not ApiAccess.from_settings("127.0.0.1", KEY).locks_every_door  # loopback: the key locks /v1 only


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
        assert httpx.get(url + "config", timeout=30).status_code == 401  # the page is locked too
        config = httpx.get(url + "config", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
        assert "Authorization: Bearer" in config
    finally:
        stop_app(app)
