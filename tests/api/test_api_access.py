"""Who may use /v1: open on loopback; bound beyond this computer, only with the key, and off without one."""

from __future__ import annotations

import pytest

from cosyvoice_mac.api.auth import ApiAccess, is_loopback

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


# Bound beyond loopback with a key, served to key holders only (the openai client, the page's config): on
# tests/reliability/test_exposed.py's locked server, which starts one app for all such tests.
