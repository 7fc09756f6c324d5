"""Refuses requests another web site makes the browser send to this app (cross-site uploads, DNS rebinding).

A browser adds ``Origin`` (or at least ``Referer``) to every request a page sends to another site, and a plain
HTML form may POST anywhere: without this check any page the user visits could push files into the upload
folder or queue jobs. So a state-changing request (anything but GET, HEAD, OPTIONS) whose Origin, or failing
that Referer, is not this server is refused with 403, unless the user allowed that origin. A request with
neither header is not a browser's cross-site request (curl, ``gradio_client``, the OpenAI client) and passes.

Whatever its method, a request whose ``Host`` is not a name the server was told to answer to is refused too:
that is how a rebinding DNS name (an attacker's name that first points at their site, then at this machine)
would reach it and read the page's files, since its Origin then matches its Host. The names are the bind
address, every ``--allowed-host``, the loopback names when the bind reaches this computer's loopback (a
loopback address, or 0.0.0.0 / ::), and, on a bind to every interface, this machine's own IP addresses (read
from its network interfaces when such a Host arrives, so an address the machine gains later is answered too):
a rebinding attack needs a DNS name, and an address of another machine is not a way to this one.

Reading is guarded too: an answer to a request from any other origin loses the CORS grant Gradio gives
every loopback origin (any port), so a page of another local app cannot read the page's files or results.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

import psutil

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = ("0.0.0.0", "::", "")  # every interface, this computer's loopback included
DEFAULT_PORTS = {"http": 80, "https": 443}
ADDRESSES_FRESH_S = 5.0  # the interfaces are read again after this: an address gained later is answered too


@dataclass(frozen=True)
class OriginPolicy:
    """Which origins besides the server's own may change state, and which ``Host`` names the server answers to.

    ``allowed_origins`` holds ``scheme://host[:port]`` strings as the user gave them (``*`` allows all);
    ``allowed_hosts`` lower-case host names without a port; ``machine_addresses`` (a bind to all interfaces)
    says this machine's IP addresses, each of which is admitted as Host (None: none beyond those names);
    ``loopback_names`` admits localhost and the loopback addresses.
    """

    allowed_origins: frozenset[str] = field(default_factory=frozenset)
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    loopback_names: bool = True
    machine_addresses: Callable[[], frozenset[str]] | None = field(default=None, compare=False)

    @classmethod
    def for_server(
        cls,
        host: str,
        allowed_origins: list[str] | tuple[str, ...] = (),
        allowed_hosts: list[str] | tuple[str, ...] = (),
        machine_addresses: Callable[[], frozenset[str]] | None = None,
    ) -> OriginPolicy:
        """The policy of a server bound to ``host``; ``machine_addresses`` reads this machine's addresses
        (default: its network interfaces, read again every few seconds)."""
        bind = host.strip().strip("[]").lower()
        every_interface = bind in WILDCARD_BINDS
        names = {_host_name(name) for name in (*allowed_hosts, bind) if _host_name(name)}
        return cls(
            frozenset(_normalise(origin) or origin for origin in allowed_origins),
            frozenset(names - set(WILDCARD_BINDS)),
            loopback_names=every_interface or is_loopback(bind),
            machine_addresses=(machine_addresses or InterfaceAddresses()) if every_interface else None,
        )

    def answers_to(self, host_header: str | None) -> bool:
        name = _hostname(host_header)
        if not name:
            return False
        if name in self.allowed_hosts or (self.loopback_names and is_loopback(name)):
            return True
        address = _address(name)
        return address is not None and self.machine_addresses is not None and address in self.machine_addresses()

    def refusal(
        self, method: str, host: str | None, origin: str | None, referer: str | None, scheme: str = "http"
    ) -> str | None:
        """Why this request is refused, or None when it may pass."""
        if not self.answers_to(host):
            return (
                f"refused: the request named the host {host!r}, which is not a name this app answers to "
                f"({self._names()}); a web page under another name may be trying to reach it. Open the app by "
                "one of those names, or start it with --allowed-host NAME to let that name in"
            )
        if method.upper() in SAFE_METHODS:
            return None
        source = origin if origin is not None else _origin_of(referer)
        if source is None:
            return None
        if self.trusts(source, host, scheme):
            return None
        return (
            f"refused: this request came from the web page at {source}, not from this app's own page, so it "
            "may not change anything here. If you trust that site, start the app with --allowed-origin "
            f"{source}"
        )

    def trusts(self, origin: str, host: str | None, scheme: str = "http") -> bool:
        """Whether a page at ``origin`` is this app's own (its scheme and ``host``) or one the user allowed."""
        if "*" in self.allowed_origins or _normalise(origin) in self.allowed_origins:
            return True
        return bool(host) and _normalise(origin) is not None and _normalise(origin) == _normalise(f"{scheme}://{host}")

    def _names(self) -> str:
        names = sorted(self.allowed_hosts)
        if self.loopback_names:
            names = ["localhost", "127.0.0.1", *[name for name in names if not is_loopback(name)]]
        if self.machine_addresses is not None:
            names.append("this machine's IP addresses")
        return ", ".join(names)


class OriginGuard:
    """ASGI middleware applying an :class:`OriginPolicy` to every HTTP request and to the CORS grant of its
    answer (owns nothing else)."""

    def __init__(self, app, policy: OriginPolicy):
        self.app = app
        self.policy = policy

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        method = scope.get("method", "GET")
        scheme = scope.get("scheme", "http").replace("ws", "http")
        why = self.policy.refusal(method, headers.get("host"), headers.get("origin"), headers.get("referer"), scheme)
        if why is None:
            origin = headers.get("origin")
            if (
                scope["type"] == "http"
                and origin is not None
                and not self.policy.trusts(origin, headers.get("host"), scheme)
            ):
                send = _without_cors(send)
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = why.encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


CORS_HEADERS = (b"access-control-allow-origin", b"access-control-allow-credentials")


def _without_cors(send):
    """``send`` with the CORS grant taken out of the answer. Gradio grants any page on a loopback origin (any
    port) the right to read its answers with the user's cookies; a page of another app on this computer is
    another site, and without the grant its browser keeps the answer from it (the voices, results, config)."""

    async def guarded(message):
        if message["type"] == "http.response.start":
            kept = [(name, value) for name, value in message.get("headers", []) if name.lower() not in CORS_HEADERS]
            message = {**message, "headers": kept}
        await send(message)

    return guarded


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address, ``[::1]`` too) stays on this computer."""
    if not host:
        return False
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: only "localhost" is known to stay on this machine
        return False


class InterfaceAddresses:
    """This machine's IP addresses as its network interfaces have them now (read again after
    ``ADDRESSES_FRESH_S``, so a request flood does not read them each time), the loopback ones always."""

    def __init__(self, fresh_s: float = ADDRESSES_FRESH_S):
        self.fresh_s, self._read_at, self._addresses = fresh_s, float("-inf"), frozenset()

    def __call__(self) -> frozenset[str]:
        if time.monotonic() - self._read_at > self.fresh_s:
            found = {"127.0.0.1", "::1"}
            for entries in psutil.net_if_addrs().values():
                found.update(entry.address for entry in entries if entry.family in (socket.AF_INET, socket.AF_INET6))
            self._addresses = frozenset(filter(None, map(_address, found)))
            self._read_at = time.monotonic()
        return self._addresses


def _address(name: str) -> str | None:
    """``name`` as an IP address in its canonical spelling (an IPv6 zone such as ``%en0`` dropped), or None."""
    try:
        return str(ipaddress.ip_address(name.split("%", 1)[0]))
    except ValueError:
        return None


def _host_name(name: str) -> str | None:
    """A host as the user wrote it (``studio.local``, ``[::1]``, ``host:7860``) in lower case, no port."""
    name = name.strip()
    if not name:
        return None
    if ":" in name and not name.startswith("[") and name.count(":") > 1:  # a bare IPv6 address
        return name.lower()
    return _hostname(name)


def _hostname(host_header: str | None) -> str | None:
    """``127.0.0.1`` from ``127.0.0.1:7860``, ``::1`` from ``[::1]:7860``."""
    if not host_header:
        return None
    try:
        return urlsplit(f"//{host_header}").hostname
    except ValueError:
        return None


def _origin_of(referer: str | None) -> str | None:
    if not referer:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"


def _normalise(origin: str) -> str | None:
    """``scheme://host:port`` in lower case with the port spelled out; None for ``null`` or junk."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"
