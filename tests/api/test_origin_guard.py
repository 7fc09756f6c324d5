"""Cross-site requests are refused: a foreign page's form POST, a rebinding DNS name; the app's own page,
allowed origins and non-browser clients pass."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from cosyvoice_mac.api.origin_guard import OriginGuard, OriginPolicy

OWN = "127.0.0.1:7860"
LOCAL = OriginPolicy.for_server("127.0.0.1")


@pytest.mark.parametrize(
    "origin, referer",
    [
        ("http://evil.example", None),
        ("null", None),  # a sandboxed frame or a file:// page
        ("http://127.0.0.1:7861", None),  # another local app is another origin
        ("https://127.0.0.1:7860", None),
        (None, "http://evil.example/attack.html"),
        (None, "file:///home/me/page.html"),
    ],
)
def test_state_changing_requests_from_another_origin_are_refused(origin, referer):
    why = LOCAL.refusal("POST", OWN, origin, referer)
    assert why and "refused" in why and "--allowed-origin" in why


@pytest.mark.parametrize(
    "origin, referer",
    [
        ("http://127.0.0.1:7860", None),
        (None, "http://127.0.0.1:7860/?view=api"),
        (None, None),  # curl, gradio_client: not a browser's cross-site request
    ],
)
def test_the_own_page_and_non_browser_clients_pass(origin, referer):
    assert LOCAL.refusal("POST", OWN, origin, referer) is None


def test_reading_is_not_refused_by_origin_but_configured_origins_may_write():
    assert LOCAL.refusal("GET", OWN, "http://evil.example", None) is None
    policy = OriginPolicy.for_server("127.0.0.1", ["HTTP://Studio.Example"])
    assert policy.refusal("POST", OWN, "http://studio.example:80", None) is None
    assert policy.refusal("POST", OWN, "http://other.example", None)
    assert OriginPolicy.for_server("127.0.0.1", ["*"]).refusal("POST", OWN, "http://any.example", None) is None


def test_a_rebinding_host_name_is_refused_on_a_loopback_server():
    assert "not a name this app answers to" in LOCAL.refusal("GET", "evil.example:7860", None, None)
    assert LOCAL.refusal("GET", "localhost:7860", None, None) is None
    assert LOCAL.refusal("GET", "[::1]:7860", None, None) is None
    lan = OriginPolicy.for_server("0.0.0.0", machine_addresses=lambda: frozenset({"192.168.1.5"}))
    assert lan.refusal("POST", "192.168.1.5:7860", "http://192.168.1.5:7860", None) is None


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "192.168.1.5", "127.0.0.1"])
def test_a_rebinding_name_is_refused_on_every_bind_with_its_own_origin(bind):
    rebind = "rebind.evil.example:7860"
    why = OriginPolicy.for_server(bind).refusal("POST", rebind, f"http://{rebind}", None)
    assert why and repr(rebind) in why and "--allowed-host" in why
    assert OriginPolicy.for_server(bind).refusal("GET", rebind, None, None)


def test_the_names_a_server_answers_to():
    this_machine = lambda: frozenset({"127.0.0.1", "::1", "10.0.0.7", "fe80::1"})  # noqa: E731
    named = OriginPolicy.for_server(
        "0.0.0.0", allowed_hosts=["Studio.Local", "proxy.example:443"], machine_addresses=this_machine
    )
    for host in ("studio.local:7860", "STUDIO.LOCAL", "proxy.example", "10.0.0.7:7860", "[fe80::1]:7860", "localhost"):
        assert named.refusal("GET", host, None, None) is None, host
    assert named.refusal("GET", "other.local:7860", None, None)
    for elsewhere in ("10.0.0.8:7860", "203.0.113.9", "[fe80::2]:7860"):  # an address, but another machine's
        why = named.refusal("GET", elsewhere, None, None)
        assert why and "this machine's IP addresses" in why, elsewhere
    one_address = OriginPolicy.for_server("192.168.1.5")
    assert one_address.refusal("GET", "192.168.1.5:7860", None, None) is None
    assert one_address.refusal("GET", "localhost:7860", None, None)  # that bind never answers on loopback
    assert one_address.refusal("GET", "10.0.0.7:7860", None, None)
    assert (
        OriginPolicy.for_server("127.0.0.1", allowed_hosts=["my-mac.local"]).refusal(
            "GET", "my-mac.local:7860", None, None
        )
        is None
    )
    assert LOCAL.refusal("GET", None, None, None)  # no Host at all: HTTP/1.1 requires one


def test_a_wildcard_bind_answers_to_the_addresses_of_its_own_interfaces_only():
    import psutil

    everywhere = OriginPolicy.for_server("0.0.0.0")
    own = [
        entry.address.split("%")[0]
        for entries in psutil.net_if_addrs().values()
        for entry in entries
        if entry.family in (socket.AF_INET, socket.AF_INET6)
    ]
    for address in own + ["127.0.0.1", "::1"]:
        host = f"[{address}]:7860" if ":" in address else f"{address}:7860"
        assert everywhere.refusal("GET", host, None, None) is None, host
    for documentation_only in ("192.0.2.1", "203.0.113.9:7860", "[2001:db8::1]:7860"):  # never a real machine's
        assert everywhere.refusal("GET", documentation_only, None, None), documentation_only
    assert OriginPolicy.for_server("::").refusal("GET", "[::1]:7860", None, None) is None


def test_an_address_the_machine_gains_later_is_answered_after_the_interfaces_are_read_again(monkeypatch):
    from cosyvoice_mac.api import origin_guard

    clock = [100.0]
    monkeypatch.setattr(origin_guard.time, "monotonic", lambda: clock[0])
    found = {"eth0": []}
    gained = type("Entry", (), {"family": socket.AF_INET, "address": "198.51.100.4"})
    monkeypatch.setattr(origin_guard.psutil, "net_if_addrs", lambda: found)
    policy = OriginPolicy.for_server("0.0.0.0")
    assert policy.refusal("GET", "198.51.100.4", None, None)
    found["eth0"] = [gained]
    assert policy.refusal("GET", "198.51.100.4", None, None)  # read a moment ago: not yet
    clock[0] += origin_guard.ADDRESSES_FRESH_S + 1
    assert policy.refusal("GET", "198.51.100.4", None, None) is None


def _run(coroutine) -> None:
    """Run ``coroutine`` on a loop of its own thread: the browser tests' Playwright keeps a loop running on
    the main thread for the whole session, and asyncio.run refuses to start beside it."""
    failure = []

    def target():
        try:
            asyncio.run(coroutine)
        except BaseException as error:  # noqa: BLE001 - re-raised on the test's thread
            failure.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    if failure:
        raise failure[0]


def test_the_middleware_answers_403_and_never_calls_the_app():
    called = []

    async def app(scope, receive, send):
        called.append(scope["path"])

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/gradio_api/upload",
        "scheme": "http",
        "headers": [(b"host", OWN.encode()), (b"origin", b"http://evil.example")],
    }
    _run(OriginGuard(app, LOCAL)(scope, None, send))
    assert called == [] and sent[0]["status"] == 403 and b"evil.example" in sent[1]["body"]
    scope["headers"] = [(b"host", OWN.encode()), (b"origin", b"http://127.0.0.1:7860")]
    _run(OriginGuard(app, LOCAL)(scope, None, send))
    assert called == ["/gradio_api/upload"]


@pytest.mark.parametrize(
    "origin, granted",
    [
        ("http://localhost:9999", False),  # another app on this computer: Gradio would grant it
        ("http://127.0.0.1:1", False),
        ("null", False),
        ("http://127.0.0.1:7860", True),  # the app's own page
        ("http://allowed.example", True),  # --allowed-origin
    ],
)
def test_only_the_own_and_allowed_origins_keep_the_cors_grant(origin, granted):
    async def app(scope, receive, send):  # grants every origin, as Gradio does every loopback one
        headers = [(b"access-control-allow-origin", origin.encode()), (b"access-control-allow-credentials", b"true")]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-kept", b"1"), *headers]})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/config",
        "scheme": "http",
        "headers": [(b"host", OWN.encode()), (b"origin", origin.encode())],
    }
    policy = OriginPolicy.for_server("127.0.0.1", ["http://allowed.example"])
    _run(OriginGuard(app, policy)(scope, None, send))
    names = {name for name, _ in sent[0]["headers"]}
    assert b"x-kept" in names and sent[1]["body"] == b"{}"
    assert (b"access-control-allow-origin" in names) is granted and (
        b"access-control-allow-credentials" in names
    ) is granted
